"""Compiling for GPU targets on this CPU machine (the CUDA plugin, in a child process: see
tests/train/aot_gpu.py). XLA does not partition a Triton call: it gathers the operands onto every
GPU, so without `ops.per_shard` the kernels would see all 8 rows on each of the 4 GPUs."""

import json
import os
import subprocess
import sys

import pytest

from tests.cli_helpers import child_env
from tests.train.aot_helpers import CUDA_AOT, REPO, needs_cuda_plugin

pytestmark = needs_cuda_plugin


@pytest.fixture(scope="module")
def compiled() -> dict:
    env = child_env(PYTHONPATH=os.pathsep.join([CUDA_AOT, REPO]))
    script = os.path.join(REPO, "tests", "train", "aot_gpu.py")
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pallas_gpu_attention_sees_each_gpus_rows(compiled):
    assert compiled["pallas_gpu"] == {"fits": True, "rows": [2], "platform": "gpu"}


def test_xla_attention_has_no_triton_kernel(compiled):
    assert compiled["xla"]["fits"] and compiled["xla"]["rows"] == []


def test_generate_compiles_for_a_gpu_with_flash_decoding_per_gpu(compiled):
    """``auto`` decodes with the flash-decoding kernel on a GPU, on each GPU's 2 of the 8 prompts."""
    assert compiled["generate_auto"] == {"fits": True, "rows": [2]}
    assert compiled["generate_dense"] == {"fits": True, "rows": []}
