"""``MoEConfig``: Mixture-of-Experts settings of a ModelConfig (``model.moe``; None = dense)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.nn.moe import MoESpec
from transformer_jax.nn.moe_config import BalanceLossConfig, CapacityConfig, RouterConfig, SoftmaxRouter
from transformer_jax.ops import moe_dispatch
from transformer_jax.ops.activations import FFN_ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class MoEConfig(Config):
    """Which layers use experts and how tokens are routed to them.

    Sizes follow DeepSeekMoE (Dai et al. 2024): ``n_experts`` experts of width ``d_expert``
    (None: the model's d_ff), ``top_k`` of them per token. Fine-grained segmentation splits each
    into ``segments`` = m experts of width d_expert / m and multiplies k by m; shared-expert
    isolation then takes ``n_shared`` of those fine experts out of the routing: every token
    passes through them. So a layer has ``n_experts * m - n_shared`` routed experts of which each
    token uses ``top_k * m - n_shared``, plus ``n_shared`` shared ones: parameters and FLOPs per
    token stay those of (n_experts, top_k) whatever m and n_shared.

    ``router``: the routing variant (nn.moe_config: ``softmax_topk`` | ``sigmoid_topk``, with
    renormalisation, scaling, group-limited routing and auxiliary-loss-free balancing);
    ``capacity``: token dropping (None: dropless); ``balance``: the balance loss (None: none);
    ``z_loss_coef * router z-loss``. ``dispatch``: ``auto`` (fastest for the backend), naive, dense,
    ragged, padded, megablox (TPU), expert_parallel. ``every``: MoE in every n-th layer (layers i
    with (i+1) % every == 0); ``first_dense``: the first k layers keep the dense FFN whatever
    ``every`` says (DeepSeek-V3's ``first_k_dense_replace``; not with ``scan_layers``).
    """

    n_experts: int = setting(8, ge=1)
    top_k: int = setting(2, ge=1)  # <= n_experts
    every: int = setting(1, ge=1)
    first_dense: int = setting(0, ge=0)
    d_expert: int | None = setting(None, ge=1)
    segments: int = setting(1, ge=1)
    n_shared: int = setting(0, ge=0)
    ffn: str | None = setting(None, choice=FFN_ACTIVATIONS)  # None: model.ffn
    router: RouterConfig = setting(factory=SoftmaxRouter)  # nn.moe_config; model.moe.router=sigmoid_topk
    capacity: CapacityConfig | None = None  # None: dropless routing
    dispatch: str = setting("auto", choice=moe_dispatch.dispatch_names())
    balance: BalanceLossConfig | None = setting(factory=BalanceLossConfig)  # None: no balance loss
    z_loss_coef: float = setting(0.0, ge=0.0)

    PATH: ClassVar[str] = "model.moe"

    def check(self) -> None:
        for rule in (_top_k_within_experts, _routed_experts_left, _segments_split_d_expert, _groups_hold_top_k):
            rule(self)

    @property
    def n_routed(self) -> int:
        """Routed experts per layer (after segmentation, without the shared ones)."""
        return self.n_experts * self.segments - self.n_shared

    @property
    def routed_k(self) -> int:
        """Routed experts each token uses."""
        return self.top_k * self.segments - self.n_shared

    def validate(self, model: Any) -> None:
        """The rules across ``model``'s fields (called by ``ModelConfig``): every stack keeps MoE
        layers, a scanned stack repeats whole groups of ``every`` layers, segments split d_ff."""
        stacks = {"model.dims.n_layers": model.dims.n_layers}
        if model.kind == "encoder_decoder":
            stacks["model.dims.n_encoder_layers"] = model.dims.n_encoder_layers
        if self.every > min(stacks.values()):
            fail(
                "model.moe.every",
                self.every,
                f"leaves a stack without MoE layers ({stacks})",
                "use every <= the number of layers, or model.moe=None for a dense model",
            )
        if self.first_dense and (min(stacks.values()) // self.every) * self.every <= self.first_dense:
            fail(
                "model.moe.first_dense",
                self.first_dense,
                f"leaves a stack without MoE layers ({stacks}, every={self.every})",
                "lower first_dense, or model.moe=None for a dense model",
            )
        if model.execution.scan_layers and self.first_dense:
            fail(
                "model.moe.first_dense",
                self.first_dense,
                "dense first layers with scan_layers=True are not supported (the scan repeats one group of layers)",
                "set model.execution.scan_layers=false",
            )
        if model.execution.scan_layers and self.every > 1:
            _check_scanned_groups(self, model, stacks)
        if self.d_expert is None and model.dims.resolved_d_ff % self.segments:
            fail(
                "model.moe.segments",
                self.segments,
                f"does not divide the expert width d_ff={model.dims.resolved_d_ff}",
                "set model.moe.d_expert to a multiple of segments",
            )

    def spec(self, d_ff: int, ffn: str) -> MoESpec:
        """The layer-level settings (``nn.moe.MoESpec``), fine-grained sizes resolved against the
        model's ``d_ff`` and ``ffn``."""
        width = (self.d_expert or d_ff) // self.segments
        return MoESpec(
            n_experts=self.n_routed,
            top_k=self.routed_k,
            d_expert=width,
            n_shared=self.n_shared,
            d_shared=width,
            ffn=self.ffn or ffn,
            router=self.router,
            capacity=self.capacity,
            dispatch=self.dispatch,
            balance=self.balance,
            z_loss_coef=self.z_loss_coef,
        )


def _check_scanned_groups(moe: MoEConfig, model: Any, stacks: dict[str, int]) -> None:
    for field, n in stacks.items():
        if n % moe.every:
            fail(
                "model.moe.every",
                moe.every,
                f"does not divide {field}={n} with scan_layers=True (the scan repeats groups of `every` layers)",
                "choose a divisor or set scan_layers=False",
            )
    if model.kind == "encoder_decoder":
        fail(
            "model.moe.every",
            moe.every,
            "every > 1 with scan_layers=True is not supported for "
            "encoder_decoder (decoder cross-attention caches assume one stacked layer kind)",
            "use every=1 or scan_layers=False",
        )


def _top_k_within_experts(moe: MoEConfig) -> None:
    if moe.top_k > moe.n_experts:
        fail("model.moe.top_k", moe.top_k, f"must be in [1, n_experts={moe.n_experts}]")


def _routed_experts_left(moe: MoEConfig) -> None:
    if moe.n_shared >= moe.top_k * moe.segments:
        fail(
            "model.moe.n_shared",
            moe.n_shared,
            f"leaves no routed expert per token (top_k * segments = {moe.top_k * moe.segments})",
            "shared experts are taken out of the top_k * segments active ones; lower n_shared or raise top_k",
        )


def _segments_split_d_expert(moe: MoEConfig) -> None:
    if moe.d_expert is not None and moe.d_expert % moe.segments:
        fail("model.moe.d_expert", moe.d_expert, f"is not divisible by segments={moe.segments}")


def _groups_hold_top_k(moe: MoEConfig) -> None:
    """Group-limited routing: the groups split the routed experts and the kept ones hold top_k."""
    groups = moe.router.groups
    if groups is None:
        return
    where = "model.moe.router.groups"
    if moe.n_routed % groups.n_groups:
        fail(f"{where}.n_groups", groups.n_groups, f"does not divide the {moe.n_routed} routed experts")
    held = groups.topk_groups * (moe.n_routed // groups.n_groups)
    if held < moe.routed_k:
        fail(
            f"{where}.topk_groups",
            groups.topk_groups,
            f"the chosen groups hold {held} experts, fewer than the {moe.routed_k} each token needs",
            "raise topk_groups or lower n_groups",
        )


def balance_loss(loss: str, coef: float) -> BalanceLossConfig | None:
    """The balance loss of a checkpoint's config that states it as a coefficient (0: none)."""
    return None if coef == 0 else BalanceLossConfig(loss=loss, coef=coef)


def balance_coef(moe: MoEConfig) -> float:
    """The balance loss's coefficient, 0 when there is none."""
    return 0.0 if moe.balance is None else moe.balance.coef
