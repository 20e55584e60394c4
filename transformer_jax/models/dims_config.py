"""``ModelDims``: the sizes of a model (``model.dims``)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import Config, fail, setting


@dataclasses.dataclass(frozen=True)
class ModelDims(Config):
    """Vocabulary, widths, heads, depths and the longest sequence of a model.

    ``n_kv_heads``: None: as many as ``n_heads`` (MHA); 1: MQA; else GQA (divides ``n_heads``).
    ``head_dim``: None: ``d_model // n_heads``. ``d_ff``: None: ``4 * d_model``. ``n_layers``: the
    decoder's layers (the whole ``decoder_lm``, or the decoder of an ``encoder_decoder``);
    ``n_encoder_layers``: an ``encoder_decoder``'s encoder only. ``max_len``: the longest sequence
    (the size of a learned position table). The ``resolved_*`` properties fill in the Nones.
    """

    vocab_size: int = setting(256, ge=2)
    d_model: int = setting(128, ge=1)
    n_heads: int = setting(4, ge=1)
    n_kv_heads: int | None = setting(None, ge=1)
    head_dim: int | None = setting(None, ge=1)
    d_ff: int | None = setting(None, ge=1)
    n_layers: int = setting(4, ge=1)
    n_encoder_layers: int = setting(0, ge=0)
    max_len: int = setting(1024, ge=1)

    PATH: ClassVar[str] = "model.dims"

    def check(self) -> None:
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            fail(
                f"{self.PATH}.n_kv_heads",
                self.n_kv_heads,
                f"does not divide {self.PATH}.n_heads={self.n_heads}",
                "use a divisor of n_heads (1 = multi-query attention)",
            )

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def resolved_kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def resolved_d_ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model


DIMS_NAMES = frozenset(f.name for f in dataclasses.fields(ModelDims))
