"""Settings of a MoE layer's routing (``model.moe.router``), capacity (``model.moe.capacity``) and
balance loss (``model.moe.balance``): each group has only the fields its choice reads.

``model.moe.router=sigmoid_topk`` chooses `SigmoidRouter`; group-limited routing is its own optional
group (``model.moe.router.groups=on``, then ``model.moe.router.groups.n_groups=8``), as are
capacity (None: dropless) and the balance loss (None: none).
"""

from __future__ import annotations

import dataclasses
import typing

from transformer_jax.core.configlib import Config, Variant, fail, setting, variant
from transformer_jax.core.registry import Registry
from transformer_jax.ops import routing


@dataclasses.dataclass(frozen=True)
class ExpertGroupsConfig(Config):
    """Group-limited routing (DeepSeek-V2 sec. 2.1.2, V3): the routed experts split into ``n_groups``
    contiguous groups, each token chooses among the experts of its ``topk_groups`` best groups, a
    group scored by ``score`` (``routing.GROUP_SCORES``: max for V2, top2_sum for V3)."""

    n_groups: int = setting(2, ge=2)
    topk_groups: int = setting(1, ge=1)
    score: str = setting("max", choice=routing.GROUP_SCORES)

    PATH: typing.ClassVar[str] = "model.moe.router.groups"

    def check(self) -> None:
        if self.topk_groups > self.n_groups:
            fail(f"{self.PATH}.topk_groups", self.topk_groups, f"exceeds n_groups={self.n_groups}")


class RouterConfig(Variant):
    """How tokens choose their experts (``routing.top_k_route``; the kind names the score function of
    ``routing.ROUTERS``). ``renormalize``: the chosen weights divided by their sum; ``scaling_factor``:
    the routed experts' combine weights times it (DeepSeek-V3's routed_scaling_factor, 2.5; the shared
    experts are not scaled); ``groups``: group-limited routing (None: over all experts);
    ``bias_update_rate``: gamma of auxiliary-loss-free balancing (a per-expert selection bias moved
    by each training step; 0: no bias)."""

    PATH = "model.moe.router"
    VARIANTS: typing.ClassVar[Registry[type[RouterConfig]]] = Registry("router")
    renormalize: bool
    scaling_factor: float
    groups: ExpertGroupsConfig | None
    bias_update_rate: float


@variant("softmax_topk")
@dataclasses.dataclass(frozen=True)
class SoftmaxRouter(RouterConfig):
    """Top-k of the softmax over the experts (Switch, GShard, Mixtral, DeepSeekMoE, DeepSeek-V2)."""

    renormalize: bool = False
    scaling_factor: float = setting(1.0, gt=0)
    groups: ExpertGroupsConfig | None = None
    bias_update_rate: float = setting(0.0, ge=0)


@variant("sigmoid_topk")
@dataclasses.dataclass(frozen=True)
class SigmoidRouter(RouterConfig):
    """Top-k of per-expert sigmoids (DeepSeek-V3: renormalised, group-limited, with the bias)."""

    renormalize: bool = False
    scaling_factor: float = setting(1.0, gt=0)
    groups: ExpertGroupsConfig | None = None
    bias_update_rate: float = setting(0.0, ge=0)


@dataclasses.dataclass(frozen=True)
class CapacityConfig(Config):
    """Token dropping: each expert takes at most ceil(``factor`` * tokens * k / experts) assignments,
    the rest dropped in ``drop_order`` (``routing.DROP_ORDERS``: rank, all first choices in token
    order then second choices...; position; score)."""

    factor: float = setting(1.25, gt=0)
    drop_order: str = setting("rank", choice=routing.DROP_ORDERS)

    PATH: typing.ClassVar[str] = "model.moe.capacity"


@dataclasses.dataclass(frozen=True)
class BalanceLossConfig(Config):
    """The auxiliary load-balancing loss ``coef * routing.BALANCE_LOSSES[loss]`` (switch, expert or
    sequence-wise)."""

    loss: str = setting("switch", choice=routing.BALANCE_LOSSES)
    coef: float = setting(0.01, gt=0)

    PATH: typing.ClassVar[str] = "model.moe.balance"
