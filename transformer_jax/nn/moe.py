"""Mixture-of-Experts feed-forward layer over ``ops.routing`` and ``ops.moe_dispatch``.

E routed experts (each a FFN of width ``d_expert``, kind by name as in ``nn.mlp``), top-k routing,
optional shared experts that every token passes through (DeepSeekMoE's shared-expert isolation),
balance losses, router z-loss and auxiliary-loss-free balancing with a per-expert bias.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float

from transformer_jax.nn.init import InitScheme
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.nn.mlp import FeedForward
from transformer_jax.nn.moe_config import BalanceLossConfig, CapacityConfig, RouterConfig, SoftmaxRouter
from transformer_jax.ops import moe_dispatch, routing
from transformer_jax.ops.activations import FFN_ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class MoESpec:
    """One MoE layer: its sizes resolved (models build it from ``MoEConfig``) and the settings groups
    of ``nn.moe_config`` as they are.

    ``n_experts``/``top_k``: routed experts and how many each token uses; ``d_expert``: width of
    one routed expert; ``n_shared`` shared experts of width ``d_shared`` (default ``d_expert``).
    ``router``: how tokens choose experts; ``capacity`` (None: dropless): which assignments are
    dropped; ``dispatch``: a name of ``moe_dispatch.dispatch_names()``. Losses: ``balance`` (None:
    none) and ``z_loss_coef * router_z_loss``.
    """

    n_experts: int
    top_k: int
    d_expert: int
    n_shared: int = 0
    d_shared: int | None = None
    ffn: str = "gelu"
    router: RouterConfig = dataclasses.field(default_factory=SoftmaxRouter)
    capacity: CapacityConfig | None = None
    dispatch: str = "auto"
    balance: BalanceLossConfig | None = None
    z_loss_coef: float = 0.0


class ExpertBias(nnx.Variable):
    """Per-expert routing bias of auxiliary-loss-free balancing: not a parameter (the optimizer
    never sees it), written by the forward pass of a training call."""


def _stacked_init(init, n: int, shape, dtype, key):
    return jax.vmap(lambda k: init(k, shape, dtype))(jax.random.split(key, n))


class MoE(nnx.Module):
    """y = sum_k w_k FFN_{e_k}(x) [+ SharedFFN(x)] with (e_k, w_k) from the router.

    Parameters: ``router`` [D, E] (``embed``, replicated), expert kernels ``w_in``/``w_gate``
    [E, D, F] (``experts``, ``embed``, ``mlp``) and ``w_out`` [E, F, D] (``experts``, ``mlp``,
    ``embed``), biases [E, F] / [E, D] when ``use_bias``; ``shared``: one FFN of width
    ``n_shared * d_shared`` (the sum of the shared experts). ``bias``: an `ExpertBias` [E] when
    ``router.bias_update_rate > 0``. The router runs in float32.
    """

    def __init__(
        self,
        d_model: int,
        spec: MoESpec,
        *,
        use_bias: bool = False,
        init: InitScheme = InitScheme(),
        gain: float = 1.0,
        dtype: Any = jnp.float32,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        self.spec = spec
        self.dtype = dtype
        E, D, F = spec.n_experts, d_model, spec.d_expert
        gated = FFN_ACTIVATIONS.get(spec.ffn).gated
        self.router = DenseGeneral(
            D,
            E,
            axes=("embed", None),
            role="router",
            kernel_init=init.kernel(0, 1),
            dtype=jnp.float32,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        k_in, k_out = init.kernel(0, 1, gain=gain), init.kernel(0, 1, residual_out=True, gain=gain)
        param = lambda ini, shape, axes, projection: nnx.Param(
            _stacked_init(ini, E, shape, param_dtype, rngs.params()), logical_axes=axes, projection=projection
        )
        self.w_in = param(k_in, (D, F), ("experts", "embed", "mlp"), "up")
        self.w_gate = param(k_in, (D, F), ("experts", "embed", "mlp"), "gate") if gated else None
        self.w_out = param(k_out, (F, D), ("experts", "mlp", "embed"), "down")
        zeros = lambda shape, axes: nnx.Param(jnp.zeros(shape, param_dtype), logical_axes=axes, role="bias")
        self.b_in = zeros((E, F), ("experts", "mlp")) if use_bias else None
        self.b_out = zeros((E, D), ("experts", "embed")) if use_bias else None
        self.shared = (
            FeedForward(
                D,
                spec.n_shared * (spec.d_shared or F),
                kind=spec.ffn,
                use_bias=use_bias,
                init=init,
                gain=gain,
                dtype=dtype,
                param_dtype=param_dtype,
                rngs=rngs,
            )
            if spec.n_shared
            else None
        )
        self.bias = ExpertBias(jnp.zeros((E,), jnp.float32)) if spec.router.bias_update_rate > 0 else None

    def expert_weights(self) -> moe_dispatch.ExpertWeights:
        get = lambda p: None if p is None else p[...].astype(self.dtype)
        return moe_dispatch.ExpertWeights(
            w_in_EDF=self.w_in[...].astype(self.dtype),
            w_out_EFD=self.w_out[...].astype(self.dtype),
            w_gate_EDF=get(self.w_gate),
            b_in_EF=get(self.b_in),
            b_out_ED=get(self.b_out),
        )

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        *,
        valid_BT: Bool[Array, "B T"] | None = None,
        train: bool = False,
        dropless: bool = False,
    ) -> tuple[Float[Array, "B T D"], dict]:
        """Returns (y, aux). aux["losses"]: the coefficient-weighted ``moe_balance`` and
        ``router_z`` (when their coefficients are > 0); aux["metrics"]: ``moe_load`` [E] (share of
        assignments per expert, before drops), ``moe_load_max_over_mean``,
        ``moe_dropped_fraction``. ``valid_BT`` False (padding) tokens take no expert capacity and
        count in no statistic. A ``train`` call updates the balancing bias. ``dropless`` ignores
        the capacity factor (KV-cache decoding: capacity is a per-batch training budget, and
        finished rows or other beams must not take a live token's slot)."""
        spec = self.spec
        B, T, D = x_BTD.shape
        E, K = spec.n_experts, spec.top_k
        x_TD = x_BTD.reshape(B * T, D).astype(self.dtype)
        valid_T = None if valid_BT is None else valid_BT.reshape(B * T)
        logits_TE = self.router(x_TD.astype(jnp.float32))
        r = _route(spec.router, logits_TE, K, None if self.bias is None else self.bias[...])
        capacity = None if dropless else spec.capacity
        dispatch = moe_dispatch.get_dispatch(spec.dispatch)
        y_TD, keep_TK = dispatch(
            x_TD,
            r.experts_TK,
            r.weights_TK.astype(self.dtype),
            self.expert_weights(),
            activation=spec.ffn,
            capacity_factor=None if capacity is None else capacity.factor,
            valid_T=valid_T,
            drop_order="rank" if capacity is None else capacity.drop_order,
        )
        if self.shared is not None:
            y_TD = y_TD + self.shared(x_TD)

        load_E = routing.expert_load(r.experts_TK, E, valid_T)
        n_assigned = jnp.maximum(jnp.sum(load_E), 1.0)
        losses = {}
        if spec.balance is not None:
            balance = routing.BALANCE_LOSSES.get(spec.balance.loss)
            losses["moe_balance"] = spec.balance.coef * balance(
                r.probs_TE.reshape(B, T, E), r.experts_TK.reshape(B, T, K), valid_BT
            )
        if spec.z_loss_coef > 0:
            losses["router_z"] = spec.z_loss_coef * routing.router_z_loss(logits_TE, valid_T)
        metrics = {
            "moe_load": load_E / n_assigned,
            "moe_load_max_over_mean": routing.load_max_over_mean(load_E),
            "moe_dropped_fraction": 1.0 - jnp.sum(keep_TK.astype(jnp.float32)) / n_assigned,
        }
        if train and self.bias is not None:
            self.bias[...] = routing.update_balance_bias(self.bias[...], load_E, spec.router.bias_update_rate)
        return y_TD.reshape(B, T, D).astype(x_BTD.dtype), {"losses": losses, "metrics": metrics}


def _route(router: RouterConfig, logits_TE: Array, k: int, bias_E: Array | None) -> routing.Routing:
    """`routing.top_k_route` with ``router``'s settings (over all experts when it has no groups)."""
    groups = router.groups
    return routing.top_k_route(
        logits_TE,
        k,
        router=router.kind,
        renormalize=router.renormalize,
        bias_E=bias_E,
        n_groups=1 if groups is None else groups.n_groups,
        topk_groups=1 if groups is None else groups.topk_groups,
        group_score="max" if groups is None else groups.score,
        scaling_factor=router.scaling_factor,
    )


def collect_moe_aux(stack_aux: dict, prefix: str = "") -> dict:
    """The MoE part of a stack's aux (``stack_aux["moe"]``: per-layer values stacked on a leading
    axis of MoE layers) as a model's aux: ``losses`` summed over layers, ``metrics`` per layer
    ([L] scalars, ``moe_load`` [L, E]); names prefixed by ``prefix``. Empty if there is no MoE."""
    moe = stack_aux.get("moe")
    if not moe:
        return {}
    return {
        "losses": {prefix + k: jnp.sum(v) for k, v in moe["losses"].items()},
        "metrics": {prefix + k: v for k, v in moe["metrics"].items()},
    }


def merge_moe_aux(*auxes: dict) -> dict:
    """Union of several `collect_moe_aux` results (e.g. an encoder's and a decoder's)."""
    out = {"losses": {}, "metrics": {}}
    for aux in auxes:
        for key in out:
            out[key].update(aux.get(key, {}))
    return out if out["losses"] or out["metrics"] else {}
