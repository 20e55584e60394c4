"""``MTPConfig``: multi-token prediction settings of a ModelConfig (``model.mtp``; None = off)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from transformer_jax.core.configlib import Config, fail, setting


@dataclasses.dataclass(frozen=True)
class MTPConfig(Config):
    """DeepSeek-V3's multi-token prediction (Liu et al. 2024, section 2.2): ``depth`` = D sequential
    modules after the main model; module k (1..D) combines the previous depth's hidden state
    h^{k-1}_i (h^0: the main model's last block) with the embedding of token t_{i+k},

        h'^k_i = M_k [RMSNorm(h^{k-1}_i); RMSNorm(Emb(t_{i+k}))]     (M_k: 2d -> d)
        h^k_i  = Block_k(h'^k_i)                                     (causal, one layer)
        P^k_i  = Head(FinalNorm_k(h^k_i))                            (predicts t_{i+k+1})

    with the embedding and output head shared with the main model. Training adds
    ``loss_weight / D * sum_k CE_k`` to the main loss (lambda in the paper: 0.3 early, 0.1 later).
    The modules also draft D tokens for speculative decoding (``decode.speculative``).
    """

    depth: int = setting(1, ge=1)
    loss_weight: float = setting(0.3, ge=0.0)

    PATH: ClassVar[str] = "model.mtp"

    def validate(self, model: Any) -> None:
        """Rules across the model's fields (called by ``ModelConfig``): only a decoder-only
        Transformer predicts further tokens, and a sequence must leave a target at every depth."""
        if model.kind != "decoder_lm":
            fail("model.mtp", self, f"multi-token prediction needs model.kind='decoder_lm' (got {model.kind!r})",
                 "set model.mtp=none")  # fmt: skip
        if self.depth + 1 >= model.dims.max_len:
            fail("model.mtp.depth", self.depth, f"leaves no target within model.dims.max_len={model.dims.max_len}")
