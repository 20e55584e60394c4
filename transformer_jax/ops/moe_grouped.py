"""Expert FFNs over rows grouped by expert, each group in a window from a static ladder of sizes.

Rows ``x_RD`` are grouped by expert: expert e owns rows [o_e, o_e + n_e), o = exclusive cumsum of
the group sizes ``n_E``. `grouped_ffn` runs expert e's FFN on the window of b_e rows at o_e, where
b_e is the smallest size of a static ladder (`window_sizes`, about 1.25x apart) that holds n_e,
picked per expert at run time: one plain 2-D GEMM per weight and expert, with
padding under a quarter of each group however skewed the load (``moe_buffer.padded_ffn`` instead
pads every expert to the mean and runs the excess in small tiles).

A window reaches past its group into rows of other experts. Each expert writes back only the
rows it owns, so the order in which experts run does not matter: there is one loop per window size
over the experts that use it, and no ``lax.cond`` (XLA:CPU copies the operands of a conditional,
here whole buffers per expert). The backward pass (hand-written, same loops, 2-D GEMMs) gives rows
outside the group a zero cotangent, so only owned rows reach the weight gradients.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from transformer_jax.ops.activations import FfnSpec
from transformer_jax.ops.moe_buffer import ExpertWeights, ffn_spec

WINDOW_RATIO = 1.25


def _round8(x: float) -> int:
    return 8 * max(1, math.ceil(x / 8))


def window_sizes(max_rows: int, smallest: int = 8, ratio: float = WINDOW_RATIO) -> tuple[int, ...]:
    """0 (an empty group: nothing runs), then multiples of 8 from ``smallest``, each about
    ``ratio`` times the last, up to the first that holds ``max_rows`` (the largest possible group)."""
    if ratio <= 1.0:
        raise ValueError(f"window ratio {ratio} must be > 1")
    sizes = [0, _round8(smallest)]
    while sizes[-1] < max_rows:
        sizes.append(max(sizes[-1] + 8, _round8(sizes[-1] * ratio)))
    return tuple(sizes)


def _overhang(sizes: tuple[int, ...]) -> int:
    """Rows a window can reach past the last group: under the largest gap of the ladder."""
    return max(b - a for a, b in itertools.pairwise(sizes))


def _windows(n_E: Int[Array, " E"], sizes: tuple[int, ...]):
    """(o_E, ladder index of each expert's window)."""
    n_E = n_E.astype(jnp.int32)
    return jnp.cumsum(n_E) - n_E, jnp.searchsorted(jnp.asarray(sizes, jnp.int32), n_E, side="left")


def _run_experts(sizes, n_E, step, carry):
    """``carry = step(b, e, o_e, n_e, carry)`` for every expert e with a non-empty group, b its
    window size: one loop per window size over the experts that use it (no ``lax.cond``, whose
    operands XLA:CPU copies, so the carried buffers are updated in place)."""
    o_E, idx_E = _windows(n_E, sizes)
    E = n_E.shape[0]
    for j, b in enumerate(sizes):
        if b == 0:
            continue
        members = jnp.nonzero(idx_E == j, size=E, fill_value=0)[0]

        def body(i, c, b=b, members=members):
            e = members[i]
            return step(b, e, o_E[e], n_E[e], c)

        carry = jax.lax.fori_loop(0, jnp.sum(idx_E == j), body, carry)
    return carry


def _window(buf, o, b):
    return jax.lax.dynamic_slice_in_dim(buf, o, b, axis=0)


def _put(buf, o, rows_bX, owned_b1):
    """Writes the owned rows of a window back (the others keep what their owner wrote)."""
    old = _window(buf, o, rows_bX.shape[0])
    return jax.lax.dynamic_update_slice_in_dim(buf, jnp.where(owned_b1, rows_bX, old), o, axis=0)


def _owned(b, n):
    return (jnp.arange(b) < n)[:, None]


def _at(a, e) -> Array:
    """Expert e's slice of a stacked weight (never called for an absent bias or gate)."""
    return jax.lax.dynamic_index_in_dim(a, e, 0, keepdims=False)


def _mm(a, b, contract=(1, 0)):
    return jax.lax.dot_general(a, b, (((contract[0],), (contract[1],)), ((), ())))


def _expert_forward(spec: FfnSpec, w: ExpertWeights, e, x_bD):
    """Expert e's FFN on a window, as 2-D GEMMs: (y [b, D], h [b, F], gate pre-activation or None)."""
    h = _mm(x_bD, _at(w.w_in_EDF, e))
    if w.b_in_EF is not None:
        h = h + _at(w.b_in_EF, e)
    g = _mm(x_bD, _at(w.w_gate_EDF, e)) if spec.gated else None
    a = spec.activation(g) * h if g is not None else spec.activation(h)
    y = _mm(a, _at(w.w_out_EFD, e))
    return (y if w.b_out_ED is None else y + _at(w.b_out_ED, e)), h, g


def _expert_backward(spec: FfnSpec, w: ExpertWeights, e, x_bD, h_bF, g_bF, d_y_bD):
    """(d_x [b, D], {field: expert e's gradient}) of `_expert_forward` (rows of d_y outside the
    group are zero, so they add nothing to the weight gradients)."""
    d_a = _mm(d_y_bD, _at(w.w_out_EFD, e), (1, 1))
    grads = {}
    if g_bF is not None:
        act_g, act_vjp = jax.vjp(spec.activation, g_bF)
        a, d_h = act_g * h_bF, d_a * act_g
        (d_g,) = act_vjp(d_a * h_bF)
        d_x = _mm(d_h, _at(w.w_in_EDF, e), (1, 1)) + _mm(d_g, _at(w.w_gate_EDF, e), (1, 1))
        grads["w_gate_EDF"] = _mm(x_bD, d_g, (0, 0))
    else:
        a, act_vjp = jax.vjp(spec.activation, h_bF)
        (d_h,) = act_vjp(d_a)
        d_x = _mm(d_h, _at(w.w_in_EDF, e), (1, 1))
    grads["w_out_EFD"] = _mm(a, d_y_bD, (0, 0))
    grads["w_in_EDF"] = _mm(x_bD, d_h, (0, 0))
    if w.b_in_EF is not None:
        grads["b_in_EF"] = jnp.sum(d_h, axis=0)
    if w.b_out_ED is not None:
        grads["b_out_ED"] = jnp.sum(d_y_bD, axis=0)
    return d_x, grads


def grouped_ffn(activation: str | FfnSpec, max_rows: int | None = None, ratio: float = WINDOW_RATIO):
    """``f(x_RD, n_E, w) -> y_RD``: rows [o_e, o_e + n_e) of ``x`` through expert e's FFN
    (``ops.activations.ffn`` with ``w``'s expert e); rows past sum(n) come out as garbage that no
    caller reads. ``max_rows`` bounds a group (default R; T for top-k routing of T tokens) and so
    the ladder. Differentiable in ``x`` and ``w`` (hand-written backward; the pre-activations are
    the residuals)."""
    spec = ffn_spec(activation)
    ladder = lambda R, E: window_sizes(min(R, max_rows or R), smallest=R / E / 4, ratio=ratio)

    def forward(x_RD, n_E, w: ExpertWeights):
        R, D = x_RD.shape
        sizes = ladder(R, w.n_experts)
        x = jnp.pad(x_RD, ((0, _overhang(sizes)), (0, 0)))
        widths = {"y": D, "h": w.w_in_EDF.shape[-1], **({"g": w.w_in_EDF.shape[-1]} if spec.gated else {})}

        def step(b, e, o, n, bufs):
            y, h, g = _expert_forward(spec, w, e, _window(x, o, b))
            owned = _owned(b, n)
            return {k: _put(bufs[k], o, v, owned) for k, v in (("y", y), ("h", h), ("g", g)) if k in bufs}

        bufs = _run_experts(sizes, n_E, step, {k: jnp.zeros((x.shape[0], d), x.dtype) for k, d in widths.items()})
        return bufs["y"][:R], (x, bufs["h"], bufs.get("g"))

    @jax.custom_vjp
    def run(x_RD, n_E, w):
        return forward(x_RD, n_E, w)[0]

    def fwd(x_RD, n_E, w):
        y, res = forward(x_RD, n_E, w)
        return y, (n_E, w, res)

    def bwd(saved, d_y_RD):
        n_E, w, (x, h, g) = saved
        R = d_y_RD.shape[0]
        d_y = jnp.pad(d_y_RD, ((0, x.shape[0] - R), (0, 0)))
        acc0 = {k: jnp.zeros_like(v) for k, v in dataclasses.asdict(w).items() if v is not None}

        def step(b, e, o, n, carry):
            acc, d_x = carry
            owned = _owned(b, n)
            gate = None if g is None else _window(g, o, b)
            d_y_win = jnp.where(owned, _window(d_y, o, b), 0)
            d_x_win, grads = _expert_backward(spec, w, e, _window(x, o, b), _window(h, o, b), gate, d_y_win)
            acc = {k: jax.lax.dynamic_update_index_in_dim(v, grads[k], e, 0) for k, v in acc.items()}
            return acc, _put(d_x, o, d_x_win, owned)

        acc, d_x = _run_experts(ladder(R, w.n_experts), n_E, step, (acc0, jnp.zeros_like(x)))
        d_w_fields: dict[str, Any] = {k: acc.get(k) for k in dataclasses.asdict(w)}  # None: an absent bias
        return d_x[:R], None, ExpertWeights(**d_w_fields)

    run.defvjp(fwd, bwd)
    return run
