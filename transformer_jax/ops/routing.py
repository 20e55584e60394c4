"""Token-to-expert routing for Mixture-of-Experts, in pure ``jax.numpy``.

Pipeline (T tokens, E experts, K experts per token):

1. router logits ``logits_TE = x_TD @ centroids_DE`` (affinity of token t with expert i, x.e_i);
2. scores: ``softmax`` (Switch, GShard, Mixtral, DeepSeekMoE) or ``sigmoid`` (DeepSeek-V3) of the
   logits, chosen by router name in ``ROUTERS``;
3. selection: top-k of ``scores + bias`` (the bias of auxiliary-loss-free balancing takes part in
   the selection only), optionally restricted to the best ``topk_groups`` of ``n_groups`` expert
   groups (DeepSeek-V2/V3 group-limited routing); combine weights are the unbiased scores of the
   selected experts, optionally renormalised to sum to 1;
4. capacity: each expert takes at most C assignments; ``expert_positions`` numbers the assignments
   of every expert in the priority order of ``DROP_ORDERS`` and those at position >= C are dropped;
   ``capacity=None`` is dropless routing;
5. auxiliary losses (``BALANCE_LOSSES``, ``router_z_loss``) and the bias update
   ``update_balance_bias``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from transformer_jax.core.registry import Registry

# Scores ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RouterSpec:
    """``scores(logits_TE) -> scores_TE`` (combine weights and selection); ``probs`` turns the
    scores into the per-token distribution that the balance losses average (P_i)."""

    scores: Callable[[Array], Array]
    probs: Callable[[Array], Array]


def _normalise(s: Array) -> Array:
    return s / jnp.sum(s, axis=-1, keepdims=True)


ROUTERS: Registry[RouterSpec] = Registry("router")
ROUTERS.register("softmax_topk", RouterSpec(lambda z: jax.nn.softmax(z, axis=-1), lambda s: s))
ROUTERS.register("sigmoid_topk", RouterSpec(jax.nn.sigmoid, _normalise))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Routing:
    """Result of `top_k_route`: for each token its K experts (best first), their combine
    weights, and the router distribution over all experts (for the balance losses)."""

    experts_TK: Int[Array, "T K"]
    weights_TK: Float[Array, "T K"]
    probs_TE: Float[Array, "T E"]


# Group-limited routing: the score of a group of experts -----------------------------------------

GROUP_SCORES: Registry[Callable[[Array], Array]] = Registry("expert-group score")
GROUP_SCORES.register("max", lambda s_TGM: jnp.max(s_TGM, axis=-1))  # DeepSeek-V2
GROUP_SCORES.register("top2_sum", lambda s_TGM: jnp.sum(jax.lax.top_k(s_TGM, min(2, s_TGM.shape[-1]))[0], -1))  # V3


def group_limited_mask(
    scores_TE: Float[Array, "T E"], n_groups: int, topk_groups: int, group_score: str = "max"
) -> Bool[Array, "T E"]:
    """True for experts in the ``topk_groups`` best of ``n_groups`` contiguous equal groups
    (group score: ``GROUP_SCORES[group_score]`` of its experts' scores; DeepSeek-V2 sec. 2.1.2)."""
    T, E = scores_TE.shape
    if E % n_groups:
        raise ValueError(f"n_groups={n_groups} does not divide the {E} experts")
    if not 1 <= topk_groups <= n_groups:
        raise ValueError(f"topk_groups={topk_groups} must be in [1, n_groups={n_groups}]")
    group_TG = GROUP_SCORES.get(group_score)(scores_TE.reshape(T, n_groups, E // n_groups))
    _, best_TJ = jax.lax.top_k(group_TG, topk_groups)
    chosen_TG = jnp.sum(jax.nn.one_hot(best_TJ, n_groups, dtype=jnp.int32), axis=1) > 0
    return jnp.repeat(chosen_TG, E // n_groups, axis=1)


def top_k_route(
    logits_TE: Float[Array, "T E"],
    k: int,
    *,
    router: str = "softmax_topk",
    renormalize: bool = False,
    bias_E: Float[Array, " E"] | None = None,
    n_groups: int = 1,
    topk_groups: int = 1,
    group_score: str = "max",
    scaling_factor: float = 1.0,
) -> Routing:
    """Top-k routing (Shazeer et al. 2017; GShard; Switch for k=1; DeepSeek-V3 eq. 13-16).

    ``s = ROUTERS[router].scores(logits)``; experts = top-k of ``s + bias`` (restricted to the best
    groups when ``n_groups > 1``); ``w_tk = s_t,e_tk`` (divided by ``sum_k w_tk`` when
    ``renormalize``), then times ``scaling_factor`` (DeepSeek-V3's ``routed_scaling_factor``, 2.5:
    the routed experts' weighted sum is scaled, the shared experts' output is not). Ties go to the
    lower expert index (``lax.top_k``).
    """
    E = logits_TE.shape[-1]
    if not 1 <= k <= E:
        raise ValueError(f"k={k} must be in [1, {E}] (the number of experts)")
    spec = ROUTERS.get(router)
    scores_TE = spec.scores(logits_TE)
    select_TE = scores_TE if bias_E is None else scores_TE + jax.lax.stop_gradient(bias_E)
    if n_groups > 1:
        allowed = group_limited_mask(select_TE, n_groups, topk_groups, group_score)
        if k > topk_groups * (E // n_groups):
            raise ValueError(f"k={k} exceeds the {topk_groups * (E // n_groups)} experts of the chosen groups")
        select_TE = jnp.where(allowed, select_TE, -jnp.inf)
    _, experts_TK = jax.lax.top_k(select_TE, k)
    weights_TK = jnp.take_along_axis(scores_TE, experts_TK, axis=-1)
    if renormalize:
        weights_TK = weights_TK / jnp.sum(weights_TK, axis=-1, keepdims=True)
    if scaling_factor != 1.0:
        weights_TK = weights_TK * scaling_factor
    return Routing(experts_TK=experts_TK.astype(jnp.int32), weights_TK=weights_TK, probs_TE=spec.probs(scores_TE))


# Capacity and drop order --------------------------------------------------------------------


def capacity(n_tokens: int, n_experts: int, k: int, factor: float | None) -> int | None:
    """Buffer size of each expert: ``ceil(factor * T * K / E)`` clipped to [1, T] (an expert
    never receives more than T assignments since a token's K experts are distinct); None
    (dropless) when ``factor`` is None."""
    if factor is None:
        return None
    return int(min(n_tokens, max(1, math.ceil(factor * n_tokens * k / n_experts))))


def _order_rank(experts_TK, weights_TK):
    T, K = experts_TK.shape
    return jnp.asarray(np.arange(T * K).reshape(T, K).T.ravel())


def _order_position(experts_TK, weights_TK):
    return jnp.arange(experts_TK.size)


def _order_score(experts_TK, weights_TK):
    return jnp.argsort(-weights_TK.ravel(), stable=True)


# Priority of the T*K assignments (index t*K + k) when an expert has more than C of them: each
# function returns the assignments best first. The first C assignments of each expert are kept.
DROP_ORDERS: Registry[Callable] = Registry("drop order")
DROP_ORDERS.register("rank", _order_rank)  # all first choices (token order), then second choices... (GShard)
DROP_ORDERS.register("position", _order_position)  # token order; a token's choices by rank
DROP_ORDERS.register("score", _order_score)  # higher combine weight first, ties by token then rank (V-MoE BPR)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Slots:
    """``position_TK``: index of assignment (t, k) in its expert's buffer (0 for invalid tokens);
    ``keep_TK``: valid and within capacity; ``counts_E``: valid assignments per expert before
    dropping (the load)."""

    position_TK: Int[Array, "T K"]
    keep_TK: Bool[Array, "T K"]
    counts_E: Int[Array, " E"]


def expert_positions(
    experts_TK: Int[Array, "T K"],
    n_experts: int,
    capacity: int | None = None,
    *,
    valid_T: Bool[Array, " T"] | None = None,
    weights_TK: Float[Array, "T K"] | None = None,
    drop_order: str = "rank",
) -> Slots:
    """Numbers each expert's assignments 0, 1, ... in ``DROP_ORDERS[drop_order]`` priority and
    keeps those with position < ``capacity`` (all valid ones when None). Invalid tokens
    (``valid_T`` False, e.g. padding) take no slot. O(T K E) with a cumulative sum, no sort
    (except for ``drop_order="score"``)."""
    T, K = experts_TK.shape
    order_A = DROP_ORDERS.get(drop_order)(experts_TK, jnp.zeros(experts_TK.shape) if weights_TK is None else weights_TK)
    valid_TK = jnp.ones((T, K), bool) if valid_T is None else jnp.broadcast_to(valid_T[:, None], (T, K))
    onehot_AE = jax.nn.one_hot(experts_TK.ravel()[order_A], n_experts, dtype=jnp.int32)
    onehot_AE = onehot_AE * valid_TK.ravel()[order_A, None]
    position_sorted_A = jnp.sum((jnp.cumsum(onehot_AE, axis=0) - 1) * onehot_AE, axis=-1)
    position_TK = jnp.zeros(T * K, jnp.int32).at[order_A].set(position_sorted_A.astype(jnp.int32)).reshape(T, K)
    keep_TK = valid_TK if capacity is None else valid_TK & (position_TK < capacity)
    return Slots(position_TK=position_TK, keep_TK=keep_TK, counts_E=jnp.sum(onehot_AE, axis=0))


# Statistics and auxiliary losses -------------------------------------------------------------


def _valid(valid, shape):
    return jnp.ones(shape, jnp.float32) if valid is None else valid.astype(jnp.float32)


def expert_load(
    experts_TK: Int[Array, "T K"], n_experts: int, valid_T: Bool[Array, " T"] | None = None
) -> Float[Array, " E"]:
    """Number of (valid) assignments routed to each expert, before any capacity drop."""
    v = _valid(valid_T, experts_TK.shape[:1])
    return jnp.einsum("tke,t->e", jax.nn.one_hot(experts_TK, n_experts, dtype=jnp.float32), v)


def load_max_over_mean(load_E: Float[Array, " E"]) -> Float[Array, ""]:
    """``max_i load_i / mean_i load_i``: 1 when perfectly balanced, E when one expert takes all."""
    return jnp.max(load_E) / jnp.maximum(jnp.mean(load_E), 1e-9)


def switch_balance_loss(
    probs_TE: Float[Array, "T E"], experts_TK: Int[Array, "T K"], valid_T: Bool[Array, " T"] | None = None
) -> Float[Array, ""]:
    """Switch / GShard balance loss ``E * sum_i f_i P_i`` (Fedus et al. 2021 eq. 4-6; GShard's
    ``mean(mask1) * mean(gates)``): f_i = fraction of tokens whose first choice is expert i,
    P_i = mean router probability of expert i. 1 when uniform."""
    E = probs_TE.shape[-1]
    v = _valid(valid_T, probs_TE.shape[:1])
    n = jnp.maximum(jnp.sum(v), 1.0)
    f_E = jnp.einsum("te,t->e", jax.nn.one_hot(experts_TK[:, 0], E, dtype=jnp.float32), v) / n
    P_E = jnp.einsum("te,t->e", probs_TE.astype(jnp.float32), v) / n
    return E * jnp.sum(f_E * P_E)


def expert_balance_loss(
    probs_TE: Float[Array, "T E"], experts_TK: Int[Array, "T K"], valid_T: Bool[Array, " T"] | None = None
) -> Float[Array, ""]:
    """DeepSeekMoE expert-level balance loss ``sum_i f_i P_i`` (Dai et al. 2024 eq. 12-14; the
    coefficient alpha is applied by the caller): f_i = E / (K T) * (number of tokens choosing i
    among their K), P_i = mean router probability of i. 1 when uniform."""
    E, K = probs_TE.shape[-1], experts_TK.shape[-1]
    v = _valid(valid_T, probs_TE.shape[:1])
    n = jnp.maximum(jnp.sum(v), 1.0)
    f_E = E / (K * n) * expert_load(experts_TK, E, valid_T)
    P_E = jnp.einsum("te,t->e", probs_TE.astype(jnp.float32), v) / n
    return jnp.sum(f_E * P_E)


def sequence_balance_loss(
    probs_BTE: Float[Array, "B T E"], experts_BTK: Int[Array, "B T K"], valid_BT: Bool[Array, "B T"] | None = None
) -> Float[Array, ""]:
    """DeepSeek-V3's complementary sequence-wise loss (eq. 17-20): `expert_balance_loss` within
    each sequence, averaged over the sequences."""
    valid = jnp.ones(probs_BTE.shape[:2], bool) if valid_BT is None else valid_BT
    return jnp.mean(jax.vmap(expert_balance_loss)(probs_BTE, experts_BTK, valid))


def _flat(fn):
    def loss(probs_BTE, experts_BTK, valid_BT=None):
        E, K = probs_BTE.shape[-1], experts_BTK.shape[-1]
        return fn(probs_BTE.reshape(-1, E), experts_BTK.reshape(-1, K), None if valid_BT is None else valid_BT.ravel())

    return loss


# name -> loss(probs_BTE, experts_BTK, valid_BT) (B = sequences; the token-level forms flatten them).
BALANCE_LOSSES: Registry[Callable] = Registry("balance loss")
BALANCE_LOSSES.register("switch", _flat(switch_balance_loss))
BALANCE_LOSSES.register("expert", _flat(expert_balance_loss))
BALANCE_LOSSES.register("sequence", sequence_balance_loss)


def router_z_loss(logits_TE: Float[Array, "T E"], valid_T: Bool[Array, " T"] | None = None) -> Float[Array, ""]:
    """ST-MoE router z-loss (Zoph et al. 2022 eq. 5): mean over tokens of ``logsumexp(logits)^2``."""
    v = _valid(valid_T, logits_TE.shape[:1])
    lse = jax.nn.logsumexp(logits_TE.astype(jnp.float32), axis=-1)
    return jnp.sum(v * lse**2) / jnp.maximum(jnp.sum(v), 1.0)


def update_balance_bias(bias_E: Float[Array, " E"], load_E: Float[Array, " E"], rate: float) -> Float[Array, " E"]:
    """Auxiliary-loss-free balancing (DeepSeek-V3 sec. 2.1.2; Wang et al. 2024):
    ``b_i <- b_i + rate * sign(mean(load) - load_i)``, outside the gradient."""
    load_E = jax.lax.stop_gradient(load_E.astype(jnp.float32))
    return jax.lax.stop_gradient(bias_E + rate * jnp.sign(jnp.mean(load_E) - load_E).astype(bias_E.dtype))
