"""Dispatch tokens to experts, run the expert FFNs, combine the results (pure ``jax.numpy``).

Every implementation has the signature ``dispatch(x_TD, experts_TK, weights_TK, w, *, activation,
capacity_factor=None, valid_T=None, drop_order="rank") -> (y_TD, keep_TK)``::

    y_t = sum_k keep_tk * w_tk * FFN_{e_tk}(x_t)

where ``keep_tk`` is False for invalid tokens and for assignments beyond an expert's capacity
(``routing.capacity``; ``capacity_factor=None``: dropless) in the order ``drop_order``. They agree
to float32 rounding; they differ in layout and speed:

- ``naive``: a Python loop over experts, every token through every expert (test reference only);
- ``dense``: GShard's one-hot dispatch/combine einsums over an [E, C, D] buffer (dropless: C = T);
- ``ragged``: assignments grouped by expert (a counting sort), one grouped matmul per weight
  (``jax.lax.ragged_dot``): no padding, no wasted FLOPs;
- ``padded``: grouped by expert into an [E, C, D] buffer (C about the mean load) run as batched
  einsums, the excess of busier experts in one-expert tiles: plain GEMMs with little padding,
  the fast dropless layout on CPU, where ``ragged_dot`` is slow;
- ``grouped``: rows grouped by expert as for ``ragged``, each expert's FFN on a window from a
  static ladder of sizes about 1.25x apart (``ops.moe_grouped``): 2-D GEMMs, padding under a
  quarter of each group however skewed the load;
- ``megablox``: ``ragged`` with the TPU Pallas grouped-matmul kernel (``ops.moe_megablox``);
- ``expert_parallel`` (``ops.moe_expert_parallel``): experts sharded over the ``expert``
  mesh axis, tokens exchanged with ``all_to_all``.

``default_dispatch()`` picks the fastest one for the platform compiled for (``core.targets.platform()``).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from transformer_jax.core import targets
from transformer_jax.core.registry import Registry, unknown_name_message
from transformer_jax.ops import routing
from transformer_jax.ops.moe_buffer import (
    ExpertWeights,
    combine_from_slots,
    expert_ffn,
    ffn_spec,
    gather_to_slots,
    padded_ffn,
)
from transformer_jax.ops.moe_expert_parallel import expert_parallel_dispatch
from transformer_jax.ops.moe_grouped import grouped_ffn
from transformer_jax.ops.moe_megablox import megablox_ragged_dot
from transformer_jax.ops.per_shard import per_shard

# Implementations ------------------------------------------------------------------------------


def _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order):
    cap = routing.capacity(experts_TK.shape[0], E, experts_TK.shape[1], capacity_factor)
    return routing.expert_positions(
        experts_TK, E, cap, valid_T=valid_T, weights_TK=weights_TK, drop_order=drop_order
    ), cap


def naive_dispatch(
    x_TD, experts_TK, weights_TK, w: ExpertWeights, *, activation, capacity_factor=None, valid_T=None, drop_order="rank"
):
    """Reference: every token through every expert (E times the FLOPs), masked by the gates."""
    E = w.n_experts
    slots, _ = _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order)
    gate_TE = jnp.einsum(
        "tke,tk->te", jax.nn.one_hot(experts_TK, E, dtype=x_TD.dtype), (weights_TK * slots.keep_TK).astype(x_TD.dtype)
    )
    y_TD = jnp.zeros_like(x_TD)
    for e in range(E):
        one = jax.tree.map(lambda a, e=e: a[e : e + 1], w)
        y_TD = y_TD + gate_TE[:, e : e + 1] * expert_ffn(x_TD[None], one, activation)[0]
    return y_TD, slots.keep_TK


def dense_dispatch(
    x_TD, experts_TK, weights_TK, w: ExpertWeights, *, activation, capacity_factor=None, valid_T=None, drop_order="rank"
):
    """GShard (Lepikhin et al. 2020, alg. 1): one-hot dispatch [T, E, C] and combine tensors,
    ``einsum("tec,td->ecd")``, the experts, ``einsum("tec,ecd->td")``. Dropless: C = T."""
    T, K = experts_TK.shape
    E = w.n_experts
    slots, cap = _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order)
    C = T if cap is None else cap
    keep = slots.keep_TK.astype(x_TD.dtype)
    dispatch_TKEC = (
        jax.nn.one_hot(experts_TK, E, dtype=x_TD.dtype)[..., None]
        * jax.nn.one_hot(slots.position_TK, C, dtype=x_TD.dtype)[:, :, None, :]
        * keep[..., None, None]
    )
    combine_TEC = jnp.einsum("tkec,tk->tec", dispatch_TKEC, weights_TK.astype(x_TD.dtype))
    x_ECD = jnp.einsum("tec,td->ecd", jnp.sum(dispatch_TKEC, axis=1), x_TD)
    return jnp.einsum("tec,ecd->td", combine_TEC, expert_ffn(x_ECD, w, activation)), slots.keep_TK


def _grouped_dest(slots: routing.Slots, experts: Int[Array, "T K"], E: int):
    """Destination row of each kept assignment when rows are grouped by expert (then by
    position); dropped ones get T*K (out of range). Returns (dest_TK, rows per expert)."""
    T, K = slots.keep_TK.shape
    kept_E = jnp.einsum("tke,tk->e", jax.nn.one_hot(experts, E, dtype=jnp.int32), slots.keep_TK.astype(jnp.int32))
    offset_E = jnp.cumsum(kept_E) - kept_E
    dest_TK = jnp.where(slots.keep_TK, offset_E[experts] + slots.position_TK, T * K)
    return dest_TK.astype(jnp.int32), kept_E.astype(jnp.int32)


def ragged_dispatch(
    x_TD,
    experts_TK,
    weights_TK,
    w: ExpertWeights,
    *,
    activation,
    capacity_factor=None,
    valid_T=None,
    drop_order="rank",
    grouped_matmul: Callable = jax.lax.ragged_dot,
):
    """Sort-based dropless MoE (MegaBlocks-style, Gale et al. 2022): rows grouped by expert
    without padding, each weight applied with one grouped matmul over the groups
    (``grouped_matmul(x_RD, w_EDF, sizes_E)``, default ``jax.lax.ragged_dot``)."""
    T, K = experts_TK.shape
    E = w.n_experts
    spec = ffn_spec(activation)
    slots, _ = _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order)
    dest_TK, sizes_E = _grouped_dest(slots, experts_TK, E)
    x_RD, src_R = gather_to_slots(x_TD, dest_TK, T * K)
    row_expert_R = jnp.minimum(jnp.searchsorted(jnp.cumsum(sizes_E), jnp.arange(T * K), side="right"), E - 1)
    h = grouped_matmul(x_RD, w.w_in_EDF, sizes_E)
    if w.b_in_EF is not None:
        h = h + w.b_in_EF[row_expert_R]
    if spec.gated:
        assert w.w_gate_EDF is not None  # a gated FFN has w_gate
        h = spec.activation(grouped_matmul(x_RD, w.w_gate_EDF, sizes_E)) * h
    else:
        h = spec.activation(h)
    y_RD = grouped_matmul(h, w.w_out_EFD, sizes_E)
    if w.b_out_ED is not None:
        y_RD = y_RD + w.b_out_ED[row_expert_R]
    return combine_from_slots(y_RD, dest_TK, src_R, weights_TK * slots.keep_TK), slots.keep_TK


def grouped_dispatch(
    x_TD, experts_TK, weights_TK, w: ExpertWeights, *, activation, capacity_factor=None, valid_T=None, drop_order="rank"
):
    """Rows grouped by expert (as ``ragged``), each expert's FFN on a window from a static ladder
    of sizes (``moe_grouped.grouped_ffn``): exact-size GEMMs up to a 1.25x padding per group."""
    T, K = experts_TK.shape
    E = w.n_experts
    slots, cap = _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order)
    dest_TK, sizes_E = _grouped_dest(slots, experts_TK, E)
    x_RD, src_R = gather_to_slots(x_TD, dest_TK, T * K)
    y_RD = grouped_ffn(activation, max_rows=T if cap is None else min(T, cap))(x_RD, sizes_E, w)
    return combine_from_slots(y_RD, dest_TK, src_R, weights_TK * slots.keep_TK), slots.keep_TK


def megablox_dispatch(
    x_TD,
    experts_TK,
    weights_TK,
    w: ExpertWeights,
    *,
    activation,
    capacity_factor=None,
    valid_T=None,
    drop_order="rank",
    interpret: bool = False,
):
    """``ragged`` with the TPU Pallas grouped matmul (``ops.moe_megablox``); a TPU kernel, run
    elsewhere only in the Pallas interpreter (``interpret=True``, tests). Under a mesh each device
    groups and multiplies its own tokens (`ops.per_shard`; expert weights gathered as under FSDP),
    so capacity drops are decided per device, as in a GShard group."""
    if not interpret and targets.platform() != "tpu":
        raise ValueError(
            f"MoE dispatch 'megablox' is a TPU kernel, but the program is compiled for {targets.platform()!r}; "
            "use dispatch 'auto', 'ragged' or 'padded'"
        )
    gmm = functools.partial(megablox_ragged_dot, interpret=interpret)
    options = dict(activation=activation, capacity_factor=capacity_factor, drop_order=drop_order)
    local = functools.partial(ragged_dispatch, grouped_matmul=gmm, **options)
    valid_T = jnp.ones(x_TD.shape[:1], bool) if valid_T is None else valid_T
    tokens = ("batch", None)
    return per_shard(
        lambda x, e, g, v, w: local(x, e, g, w, valid_T=v),
        (x_TD, experts_TK, weights_TK, valid_T, w),
        (tokens, tokens, tokens, ("batch",), None),
        [tokens, tokens],
    )


def padded_dispatch(
    x_TD,
    experts_TK,
    weights_TK,
    w: ExpertWeights,
    *,
    activation,
    capacity_factor=None,
    valid_T=None,
    drop_order="rank",
    first: float = 1.0,
    tile: float = 0.25,
):
    """Group by expert, pad every group to the same length C, batched einsums
    (``moe_buffer.padded_ffn``). With a capacity factor, C is the capacity. Dropless, C is
    ``first * mean`` (mean = T K / E, rounded up to 8) and each expert's load beyond C runs in
    tiles of ``tile * mean`` rows, one expert per tile: padding stays under C E - T K plus one
    tile per overflowing expert. Only GEMMs: the fast CPU layout."""
    T, K = experts_TK.shape
    E = w.n_experts
    slots, cap = _slots(experts_TK, weights_TK, E, capacity_factor, valid_T, drop_order)
    mean = T * K / E
    if cap is not None:
        rows, more = cap, None
    else:
        rows, more = min(T, _round8(first * mean)), min(T, _round8(tile * mean))
    f = padded_ffn(rows, more, T, activation)
    return f(x_TD, weights_TK, w, experts_TK, slots.position_TK, slots.keep_TK), slots.keep_TK


def _round8(x: float) -> int:
    return 8 * max(1, math.ceil(x / 8))


DISPATCHES: Registry[Callable] = Registry("MoE dispatch")
DISPATCHES.register("naive", naive_dispatch)
DISPATCHES.register("dense", dense_dispatch)
DISPATCHES.register("ragged", ragged_dispatch)
DISPATCHES.register("padded", padded_dispatch)
DISPATCHES.register("grouped", grouped_dispatch)
DISPATCHES.register("megablox", megablox_dispatch)
DISPATCHES.register("expert_parallel", expert_parallel_dispatch)

# Fastest dropless layout per backend (measured; see the module docstring). Others: ragged.
BACKEND_DEFAULTS: dict[str, str] = {"cpu": "padded"}


def dispatch_names() -> tuple[str, ...]:
    """Every valid ``dispatch`` name: ``auto`` and the registered ones."""
    return ("auto",) + tuple(DISPATCHES.names())


def default_dispatch(backend: str | None = None) -> str:
    """The dispatch ``auto`` resolves to on ``backend`` (default: ``core.targets.platform()``)."""
    return BACKEND_DEFAULTS.get(backend or targets.platform(), "ragged")


def get_dispatch(name: str) -> Callable:
    """The implementation registered as ``name`` (``auto``: `default_dispatch`), under ``jax.jit``
    (options static) so that eager calls compile once per shape."""
    if name == "auto":
        name = default_dispatch()
    if name not in DISPATCHES:
        raise KeyError(unknown_name_message("MoE dispatch", name, dispatch_names()))
    return _jitted(DISPATCHES.get(name))


STATIC_OPTIONS = ("activation", "capacity_factor", "drop_order", "first", "tile", "axis", "interpret")


@functools.cache
def _jitted(fn: Callable) -> Callable:
    params = inspect.signature(fn).parameters
    return jax.jit(fn, static_argnames=tuple(n for n in STATIC_OPTIONS if n in params))
