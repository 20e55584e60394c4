"""``ExecutionConfig``: how a model runs, not what it computes (``model.execution``)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.core.dtypes import DTYPES
from transformer_jax.core.registry import Registry
from transformer_jax.nn.remat import REMAT_POLICIES
from transformer_jax.ops import attention as attention_ops
from transformer_jax.ops.decode_attention import DECODE_BLOCK_SIZE, DECODE_IMPLS


@dataclasses.dataclass(frozen=True)
class ExecutionConfig(Config):
    """Precision, kernels and memory/compile trade-offs. The same weights compute the same function
    under any of these (up to rounding), so a checkpoint does not fix them: ``train --init-from``
    may change them and Hugging Face configs do not hold them.

    ``dtype``: compute dtype; ``param_dtype``: stored parameters; ``attention_impl`` (ops.attention
    ATTENTION_IMPLS) with its ``attention_block_size``; ``decode_impl`` (attention over the KV cache,
    ops.decode_attention.DECODE_IMPLS) with its ``decode_block_size``; ``scan_layers``: one scanned
    layer instead of a Python loop (faster compiles); ``remat`` (nn.remat.REMAT_POLICIES).
    """

    dtype: str = setting("float32", choice=DTYPES)
    param_dtype: str = setting("float32", choice=DTYPES)
    attention_impl: str = setting("xla", choice=attention_ops.ATTENTION_IMPLS)
    attention_block_size: int = setting(512, ge=1)
    decode_impl: str = setting("auto", choice=DECODE_IMPLS)
    decode_block_size: int = setting(DECODE_BLOCK_SIZE, ge=1)
    scan_layers: bool = False
    remat: str = setting("none", choice=REMAT_POLICIES)

    PATH: ClassVar[str] = "model.execution"

    def check(self) -> None:
        _block_size_read(self, "attention", attention_ops.ATTENTION_IMPLS, 512)
        _block_size_read(self, "decode", DECODE_IMPLS, DECODE_BLOCK_SIZE)

    @property
    def compute_dtype(self):
        return DTYPES.get(self.dtype)

    @property
    def params_dtype(self):
        return DTYPES.get(self.param_dtype)


def _block_size_read(cfg: ExecutionConfig, what: str, impls: Registry, default: int) -> None:
    """A ``{what}_block_size`` other than its default needs an impl that tiles (``reads=("block_size",)``
    in its registry): with any other it would be ignored."""
    impl, size = getattr(cfg, f"{what}_impl"), getattr(cfg, f"{what}_block_size")
    if size == default or "block_size" in impls.reads(impl):
        return
    tiled = ", ".join(name for name in impls.names() if "block_size" in impls.reads(name))
    fail(
        f"{cfg.PATH}.{what}_block_size",
        size,
        f"is not read by {what}_impl={impl!r} (only by the tiled impls: {tiled})",
        f"remove the setting (default {default}) or choose one of those impls",
    )
