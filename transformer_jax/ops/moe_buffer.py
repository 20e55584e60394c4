"""The expert-buffer layout of MoE dispatch, in pure ``jax.numpy``.

Assignment (t, k) of token t to expert e, kept at position p of that expert's buffer, occupies
row ``e * C + p`` of an [E * C, D] buffer (a "slot"); empty slots hold zeros. The experts then run
as batched einsums over [E, C, D]. Moving rows in and out is a gather in both directions (also in
the backward pass), never a scatter-add.

`padded_ffn` runs the whole dropless dispatch -> experts -> combine: a first round of equal-sized
buffers, then the overflow of the busiest experts in one-expert tiles inside a loop whose trip
count depends on the batch. Reverse-mode autodiff cannot see through such a loop, so the backward
pass is written by hand (it also keeps the residuals small: the first round's activations only).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from transformer_jax.ops.activations import FFN_ACTIVATIONS, FfnSpec


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ExpertWeights:
    """The E expert FFNs, stacked: ``w_in``/``w_gate`` [E, D, F], ``w_out`` [E, F, D], optional
    biases ``b_in`` [E, F], ``b_out`` [E, D]; ``w_gate`` only for gated activations (SwiGLU)."""

    w_in_EDF: Float[Array, "E D F"]
    w_out_EFD: Float[Array, "E F D"]
    w_gate_EDF: Float[Array, "E D F"] | None = None
    b_in_EF: Float[Array, "E F"] | None = None
    b_out_ED: Float[Array, "E D"] | None = None

    @property
    def n_experts(self) -> int:
        return self.w_in_EDF.shape[0]


def ffn_spec(activation: str | FfnSpec) -> FfnSpec:
    return FFN_ACTIVATIONS.get(activation) if isinstance(activation, str) else activation


def expert_ffn(x_ECD: Float[Array, "E C D"], w: ExpertWeights, activation: str | FfnSpec) -> Float[Array, "E C D"]:
    """Expert e's FFN (``ops.activations.ffn``) applied to its C rows, as batched einsums."""
    spec = ffn_spec(activation)
    h = jnp.einsum("ecd,edf->ecf", x_ECD, w.w_in_EDF)
    if w.b_in_EF is not None:
        h = h + w.b_in_EF[:, None, :]
    h = spec.activation(jnp.einsum("ecd,edf->ecf", x_ECD, w.w_gate_EDF)) * h if spec.gated else spec.activation(h)
    y = jnp.einsum("ecf,efd->ecd", h, w.w_out_EFD)
    return y if w.b_out_ED is None else y + w.b_out_ED[:, None, :]


# Row permutations ---------------------------------------------------------------------------


def _take(x, index):
    return jnp.take(x, index, axis=0, mode="fill", fill_value=0)


@jax.custom_vjp
def permute_rows(x_ND: Array, index_M: Int[Array, " M"], inverse_N: Int[Array, " N"]) -> Array:
    """``out[m] = x[index[m]]`` (0 where ``index[m]`` is out of range), for a partial one-to-one
    map whose inverse is ``inverse`` (``inverse[index[m]] = m``; out of range for unused rows):
    the cotangent is then gathered back, ``g_x[n] = g_out[inverse[n]]``."""
    return _take(x_ND, index_M)


def _permute_fwd(x, index, inverse):
    return _take(x, index), (index, inverse)


def _permute_bwd(res, g):
    index, inverse = res
    return _take(g, inverse), None, None


permute_rows.defvjp(_permute_fwd, _permute_bwd)


def slot_sources(dest_A: Int[Array, " A"], n_slots: int) -> Int[Array, " S"]:
    """The inverse of assignment -> slot: the assignment in each slot (A where empty)."""
    A = dest_A.shape[0]
    return jnp.full((n_slots,), A, jnp.int32).at[dest_A].set(jnp.arange(A, dtype=jnp.int32), mode="drop")


def _repeat_k(x_TD, K):
    T, D = x_TD.shape
    return jnp.broadcast_to(x_TD[:, None, :], (T, K, D)).reshape(T * K, D)


def gather_to_slots(x_TD: Float[Array, "T D"], dest_TK: Int[Array, "T K"], n_slots: int):
    """The slot buffer [n_slots, D]: assignment (t, k) goes to slot ``dest[t, k]`` (dropped ones
    carry ``dest >= n_slots``). Returns (buffer, slot -> assignment map)."""
    src_S = slot_sources(dest_TK.ravel(), n_slots)
    return permute_rows(_repeat_k(x_TD, dest_TK.shape[1]), src_S, dest_TK.ravel()), src_S


def combine_from_slots(
    y_SD: Float[Array, "S D"], dest_TK: Int[Array, "T K"], src_S: Int[Array, " S"], weights_TK: Float[Array, "T K"]
) -> Float[Array, "T D"]:
    """``y_t = sum_k w_tk * y_S[dest_tk]`` (0 for dropped assignments)."""
    T, K = dest_TK.shape
    y_TKD = permute_rows(y_SD, dest_TK.ravel(), src_S).reshape(T, K, -1)
    return jnp.einsum("tkd,tk->td", y_TKD, weights_TK.astype(y_TKD.dtype))


def buffer_dest(
    experts_TK: Int[Array, "T K"], position_TK: Int[Array, "T K"], keep_TK: Bool[Array, "T K"], n_experts: int, C: int
) -> Int[Array, "T K"]:
    """Slot ``e * C + p`` of each kept assignment; ``E * C`` (out of range) for dropped ones."""
    return jnp.where(keep_TK, experts_TK * C + position_TK, n_experts * C).astype(jnp.int32)


# Padded layout: a batched first round, then overflow tiles; a hand-written backward pass --------


def slot_table(
    experts_TK: Int[Array, "T K"],
    position_TK: Int[Array, "T K"],
    keep_TK: Bool[Array, "T K"],
    n_experts: int,
    n_positions: int,
) -> Int[Array, "E P"]:
    """``table[e, p]`` = the assignment index t*K + k kept at position p of expert e; T*K (out of
    range) where empty."""
    A = experts_TK.size
    rows = jnp.where(keep_TK, experts_TK, n_experts).ravel()
    return (
        jnp.full((n_experts, n_positions), A, jnp.int32)
        .at[rows, position_TK.ravel()]
        .set(jnp.arange(A, dtype=jnp.int32), mode="drop")
    )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class OverflowTiles:
    """The kept assignments at positions >= ``first`` (beyond the first round), cut into tiles of
    ``m`` rows that each belong to one expert: ``n`` tiles in use (of a static bound J); tile j
    holds positions ``start_J[j] + [0, m)`` of expert ``expert_J[j]``; assignment a sits in row
    ``row_A[a]`` of the [J * m] overflow buffer (out of range if it is not an overflow one)."""

    n: Int[Array, ""]
    expert_J: Int[Array, " J"]
    start_J: Int[Array, " J"]
    row_A: Int[Array, " A"]


def overflow_tiles(experts_TK, position_TK, keep_TK, n_experts: int, first: int, m: int) -> OverflowTiles:
    """`OverflowTiles` of a routing: expert e with load L_e needs ceil(max(0, L_e - first) / m)
    tiles, so at most ``ceil(T K / m) + E`` tiles exist (the static bound J)."""
    E, A = n_experts, experts_TK.size
    n_tiles = -(-A // m) + E
    load_E = jnp.zeros((E,), jnp.int32).at[experts_TK.ravel()].add(keep_TK.ravel().astype(jnp.int32))
    tiles_E = (jnp.maximum(load_E - first, 0) + m - 1) // m
    end_E = jnp.cumsum(tiles_E)
    begin_E = end_E - tiles_E
    j = jnp.arange(n_tiles, dtype=jnp.int32)
    expert_J = jnp.minimum(jnp.sum(end_E[None, :] <= j[:, None], axis=1), E - 1).astype(jnp.int32)
    start_J = first + (j - begin_E[expert_J]) * m
    over_TK = keep_TK & (position_TK >= first)
    row_TK = jnp.where(over_TK, begin_E[experts_TK] * m + position_TK - first, n_tiles * m)
    return OverflowTiles(
        n=end_E[-1], expert_J=expert_J, start_J=start_J.astype(jnp.int32), row_A=row_TK.ravel().astype(jnp.int32)
    )


def _tokens_of(src_EC, K, T):
    """Token index of each slot's assignment (T, out of range, for empty slots)."""
    return jnp.where(src_EC < T * K, src_EC // K, T)


def _experts_forward(spec, w, x_ECD):
    h = jnp.einsum("ecd,edf->ecf", x_ECD, w.w_in_EDF)
    if w.b_in_EF is not None:
        h = h + w.b_in_EF[:, None, :]
    g = jnp.einsum("ecd,edf->ecf", x_ECD, w.w_gate_EDF) if spec.gated else None
    a = spec.activation(g) * h if spec.gated else spec.activation(h)
    y = jnp.einsum("ecf,efd->ecd", a, w.w_out_EFD)
    if w.b_out_ED is not None:
        y = y + w.b_out_ED[:, None, :]
    return y, h, g


def _experts_backward(spec, w, x, h, g, d_y, acc):
    """Adds the weight gradients of one buffer to ``acc``; returns d_x [E, C, D]."""
    if spec.gated:
        act_g, act_vjp = jax.vjp(spec.activation, g)
        a = act_g * h
        d_a = jnp.einsum("ecd,efd->ecf", d_y, w.w_out_EFD)
        d_h, (d_g,) = d_a * act_g, act_vjp(d_a * h)
        d_x = jnp.einsum("ecf,edf->ecd", d_h, w.w_in_EDF) + jnp.einsum("ecf,edf->ecd", d_g, w.w_gate_EDF)
        acc["w_gate_EDF"] = acc["w_gate_EDF"] + jnp.einsum("ecd,ecf->edf", x, d_g)
    else:
        a, act_vjp = jax.vjp(spec.activation, h)
        (d_h,) = act_vjp(jnp.einsum("ecd,efd->ecf", d_y, w.w_out_EFD))
        d_x = jnp.einsum("ecf,edf->ecd", d_h, w.w_in_EDF)
    acc["w_out_EFD"] = acc["w_out_EFD"] + jnp.einsum("ecf,ecd->efd", a, d_y)
    acc["w_in_EDF"] = acc["w_in_EDF"] + jnp.einsum("ecd,ecf->edf", x, d_h)
    if w.b_in_EF is not None:
        acc["b_in_EF"] = acc["b_in_EF"] + jnp.sum(d_h, axis=1)
    if w.b_out_ED is not None:
        acc["b_out_ED"] = acc["b_out_ED"] + jnp.sum(d_y, axis=1)
    return d_x


def _one_expert(w: ExpertWeights, e) -> ExpertWeights:
    return jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, e, 0, keepdims=True), w)


def _add_at(acc_E, e, part_1):
    """``acc[e] += part[0]`` as a dynamic slice update (no scatter)."""
    old = jax.lax.dynamic_index_in_dim(acc_E, e, 0, keepdims=True)
    return jax.lax.dynamic_update_index_in_dim(acc_E, old + part_1, e, 0)


def _loop_if_needed(n, body, init):
    """``fori_loop(0, n, body, init())`` behind a ``lax.cond`` (the common n = 0 skips the loop),
    with the carry created inside the branches: no large operand crosses the control flow."""
    return jax.lax.cond(n > 0, lambda: jax.lax.fori_loop(0, n, body, init()), init)


def padded_ffn(first: int, tile: int | None, n_positions: int, activation: str | FfnSpec):
    """``f(x_TD, weights_TK, w, experts_TK, position_TK, keep_TK) -> y_TD`` with
    ``y_t = sum_k keep_tk w_tk FFN_{e_tk}(x_t)``. Every expert's kept assignments at positions
    [0, first) run as one batched einsum [E, first, D]; the rest (an expert's load beyond
    ``first``) in `OverflowTiles` of ``tile`` rows, one expert per tile, in a loop over the tiles
    in use (``tile=None``: no overflow; every kept position must then be < ``first``). Padding is
    thus the first round's empty rows plus under one tile per overflowing expert, however skewed
    the load. ``n_positions`` bounds the positions (T). Differentiable in x, weights and w, with a
    hand-written backward pass: the first round keeps its activations, the tiles recompute theirs;
    rows move by gathers and slice updates, never a scatter."""
    spec = ffn_spec(activation)
    n_cols = max(first, n_positions) + (tile or 0)
    tile_rows = tile or 0  # = tile wherever it is read: there are tiles only when tile is not None

    def setup(experts, position, keep, E):
        table = slot_table(experts, position, keep, E, n_cols)
        dest0_A = jnp.where(keep & (position < first), experts * first + position, E * first).ravel()
        tiles = None if tile is None else overflow_tiles(experts, position, keep, E, first, tile)
        return table, dest0_A, tiles

    def tile_src(table, tiles, i):
        row = jax.lax.dynamic_index_in_dim(table, tiles.expert_J[i], 0, keepdims=True)
        return jax.lax.dynamic_slice_in_dim(row, tiles.start_J[i], tile_rows, axis=1)

    def forward(x, wt, w, experts, position, keep):
        T, K = experts.shape
        E, D = w.n_experts, x.shape[-1]
        table, dest0_A, tiles = setup(experts, position, keep, E)
        rows = lambda src: _take(x, _tokens_of(src, K, T).ravel()).reshape(src.shape + (D,))
        y0, h0, g0 = _experts_forward(spec, w, rows(table[:, :first]))
        y_AD = _take(y0.reshape(E * first, D), dest0_A)
        if tiles is not None:

            def body(i, buf):
                src = tile_src(table, tiles, i)
                y = _experts_forward(spec, _one_expert(w, tiles.expert_J[i]), rows(src))[0]
                return jax.lax.dynamic_update_slice_in_dim(buf, y[0], i * tile_rows, axis=0)

            buf = _loop_if_needed(tiles.n, body, lambda: jnp.zeros((tiles.expert_J.size * tile_rows, D), x.dtype))
            y_AD = y_AD + _take(buf, tiles.row_A)
        y_TD = jnp.einsum("tkd,tk->td", y_AD.reshape(T, K, D), (wt * keep).astype(x.dtype))
        return y_TD, (y_AD, h0, g0)

    @jax.custom_vjp
    def run(x, wt, w, experts, position, keep):
        return forward(x, wt, w, experts, position, keep)[0]

    def fwd(x, wt, w, experts, position, keep):
        y, res = forward(x, wt, w, experts, position, keep)
        return y, ((x, wt, w, experts, position, keep), res)

    def bwd(saved, g_TD):
        (x, wt, w, experts, position, keep), (y_AD, h0, g0) = saved
        T, K = experts.shape
        E, D = w.n_experts, x.shape[-1]
        table, dest0_A, tiles = setup(experts, position, keep, E)
        rows = lambda z, src: _take(z, src.ravel()).reshape(src.shape + (z.shape[-1],))
        x_rows = lambda src: rows(x, _tokens_of(src, K, T))
        wk = (wt * keep).astype(g_TD.dtype)
        d_wt = jnp.einsum("tkd,td->tk", y_AD.reshape(T, K, D), g_TD) * keep
        d_y_AD = (g_TD[:, None, :] * wk[..., None]).reshape(T * K, D)
        acc = {k: jnp.zeros_like(v) for k, v in dataclasses.asdict(w).items() if v is not None}
        src0 = table[:, :first]
        d_x0 = _experts_backward(spec, w, x_rows(src0), h0, g0, rows(d_y_AD, src0), acc)
        d_x_AD = _take(d_x0.reshape(E * first, D), dest0_A)
        if tiles is not None:

            def body(i, carry):
                acc, buf = carry
                src, e = tile_src(table, tiles, i), tiles.expert_J[i]
                w_e, x_1CD = _one_expert(w, e), x_rows(src)
                _, h, g = _experts_forward(spec, w_e, x_1CD)
                part = {k: jnp.zeros_like(v[:1]) for k, v in acc.items()}
                d_x = _experts_backward(spec, w_e, x_1CD, h, g, rows(d_y_AD, src), part)
                acc = {k: _add_at(v, e, part[k]) for k, v in acc.items()}
                return acc, jax.lax.dynamic_update_slice_in_dim(buf, d_x[0], i * tile_rows, axis=0)

            zeros = lambda: (
                {k: jnp.zeros_like(v) for k, v in acc.items()},
                jnp.zeros((tiles.expert_J.size * tile_rows, D), x.dtype),
            )
            acc_tiles, buf = _loop_if_needed(tiles.n, body, zeros)
            acc = {k: v + acc_tiles[k] for k, v in acc.items()}
            d_x_AD = d_x_AD + _take(buf, tiles.row_A)
        d_x = jnp.sum(d_x_AD.reshape(T, K, D), axis=1)
        d_w_fields: dict[str, Any] = {k: acc.get(k) for k in dataclasses.asdict(w)}  # None: an absent bias
        d_w = ExpertWeights(**d_w_fields)
        return d_x.astype(x.dtype), d_wt.astype(wt.dtype), d_w, None, None, None

    run.defvjp(fwd, bwd)
    return run
