"""Shared by the compile-for-a-target tests: what is installed, tiny configs, kernel shapes in HLO."""

import dataclasses
import importlib.util
import os
import re

import jax
import pytest

from transformer_jax.data import DataConfig
from transformer_jax.models import get_preset
from transformer_jax.models.config import with_changes
from transformer_jax.parallel import MeshConfig
from transformer_jax.train.config import Config, TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA_AOT = os.environ.get("TRANSFORMER_JAX_CUDA_AOT", os.path.join(REPO, ".cuda_aot"))
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None
HAS_CUDA_PLUGIN = os.path.isdir(os.path.join(CUDA_AOT, "jax_plugins", "xla_cuda12"))

needs_libtpu = pytest.mark.skipif(
    not HAS_LIBTPU, reason="libtpu is not installed: pip install -c constraints.txt -e '.[tpu]' (CI installs it)"
)
needs_cuda_plugin = pytest.mark.skipif(
    not HAS_CUDA_PLUGIN,
    reason=f"the CUDA compiler plugin is not in {CUDA_AOT}: pip install -c constraints.txt --no-deps --target "
    ".cuda_aot jax-cuda12-plugin jax-cuda12-pjrt (CI installs it)",
)


@pytest.fixture
def no_persistent_cache():
    """Compile-only executables cannot be stored in the persistent compilation cache."""
    previous = jax.config.jax_enable_compilation_cache  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", previous)


def tiny_config(*, batch: int = 8, seq_len: int = 128, mesh: MeshConfig = MeshConfig(), **model) -> Config:
    """llama_tiny in bfloat16 at ``seq_len`` (a multiple of 128, splash's tile), global ``batch``."""
    options = dict(max_len=seq_len, dtype="bfloat16", vocab_size=256) | model
    return Config(
        model=get_preset("llama_tiny", **options),
        data=DataConfig(seq_len=seq_len),
        train=TrainConfig(batch_size=batch, steps=10),
        mesh=mesh,
    )


def replace_model(cfg: Config, **changes) -> Config:
    return dataclasses.replace(cfg, model=with_changes(cfg.model, **changes))


_SHAPE = re.compile(r"\b(?:bf16|f32|f16|s32)\[([0-9,]+)\]")


def kernel_shapes(hlo: str, target_name: str) -> list[tuple[int, ...]]:
    """Every array shape on the lines of custom calls to ``target_name`` (results and operand layouts)."""
    shapes = []
    for line in hlo.splitlines():
        if f'custom_call_target="{target_name}"' in line:
            shapes += [tuple(int(d) for d in dims.split(",")) for dims in _SHAPE.findall(line)]
    return shapes
