"""``MoEConfig``: Mixture-of-Experts settings of a ModelConfig (``model.moe``; None = dense)."""

from __future__ import annotations

import dataclasses

from transformer_jax.configlib import check_positive, fail


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """Which layers use experts and how tokens are routed to them."""

    n_experts: int = 8
    top_k: int = 2
    every: int = 1  # MoE in place of the FFN in every n-th layer

    def __post_init__(self):
        check_positive("model.moe.n_experts", self.n_experts)
        check_positive("model.moe.every", self.every)
        if not 1 <= self.top_k <= self.n_experts:
            fail("model.moe.top_k", self.top_k, f"must be in [1, n_experts={self.n_experts}]")
