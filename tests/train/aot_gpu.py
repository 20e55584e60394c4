"""Run by tests/train/test_aot_gpu.py in a child process whose PYTHONPATH holds the CUDA compiler
plugin (kept out of the test environment, where it would print at every JAX import): compiles for
GPU targets and prints one JSON object of what the tests check."""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax

jax.config.update("jax_enable_compilation_cache", False)

from tests.train.aot_helpers import kernel_shapes, tiny_config  # noqa: E402
from transformer_jax.core.targets import get_target  # noqa: E402
from transformer_jax.parallel import MeshConfig  # noqa: E402
from transformer_jax.train import aot  # noqa: E402

TRITON = "__gpu$xla.gpu.triton"
FSDP4 = MeshConfig(data=1, fsdp=4)


def train_kernel_rows(impl: str) -> dict:
    """The train step of 8 rows on h100x4 (fsdp 4): the rows of the Triton kernels' 4-D arrays."""
    cfg = tiny_config(batch=8, mesh=FSDP4, attention_impl=impl)
    report = aot.compile_train(cfg, get_target("h100x4"), keep_hlo=True)
    rows = sorted({s[0] for s in kernel_shapes(report["hlo_text"], TRITON) if len(s) == 4})
    return {"fits": report["fits"], "rows": rows, "platform": report["platform"]}


def decode_kernel_rows(decode_impl: str) -> dict:
    """Generation of 8 prompts on h100x4 (fsdp 4): the rows of the Triton kernels' arrays (``auto``
    decodes each new token with the flash-decoding kernel on a GPU)."""
    cfg = tiny_config(batch=8, mesh=FSDP4, decode_impl=decode_impl)
    report = aot.compile_decode(cfg, get_target("h100x4"), batch=8, prompt_len=16, new_tokens=16, keep_hlo=True)
    shapes = kernel_shapes(report["hlo_text"], TRITON)
    return {"fits": report["fits"], "rows": sorted({s[0] for s in shapes if len(s) >= 3})}


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "pallas_gpu": train_kernel_rows("pallas_gpu"),
                "xla": train_kernel_rows("xla"),
                "generate_auto": decode_kernel_rows("auto"),
                "generate_dense": decode_kernel_rows("dense"),
            }
        )
    )
