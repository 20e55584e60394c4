"""Attention over a sequence split across devices (context parallelism), called inside ``shard_map``.

Each of the n devices of the mesh axis ``axis_name`` holds Tl = T / n query rows and the keys/values
of the same tokens. Two ways to attend over all T keys:

- `ring_attention` (Liu et al. 2023, "Ring Attention with Blockwise Transformers"): n steps; at
  each the local queries attend to the K/V block in hand with the blockwise kernel of
  `ops.chunked_attention`, which returns the block's output O_j and log-sum-exp L_j, and the block
  moves to the next device (``jax.lax.ppermute``). Blocks merge by their log-sum-exps:
  L = logaddexp(L_a, L_b), O = exp(L_a - L) O_a + exp(L_b - L) O_b. The backward pass is a second
  ring: dQ accumulates locally while dK, dV travel with their block and arrive home after n steps
  (FlashAttention-2's per-block formulas with the final O and L). Memory O(Tl * block) per device.
- `all_gather_attention`: K/V (and the key-side mask arrays) gathered over the axis, then any
  attention kernel on the local queries against all T keys (K/V memory O(T); autodiff transposes
  the gather into a reduce-scatter).

Layout (the order of the sequence along the sharded dimension): ``"contiguous"`` gives device i the
tokens [i Tl, (i+1) Tl); under a causal mask device n-1 then has n times the work of device 0.
``"zigzag"`` (load-balanced; Brandon et al. 2023, "Striped Attention", and the zigzag variant of
ring-flash-attention) cuts the sequence into 2n chunks of Tl / 2 and gives device i chunks i and
2n-1-i, so every device has the same number of visible (query, key) pairs. `zigzag_perm` lays a
global sequence out so; `layout_index` is the global position of each local token, which the mask
uses where its positions are not given. Blocks with no visible key are skipped (no FLOPs).

Shapes: q [B, Tl, H, D], k/v [B, Tl, K, D] (GQA: H = K * G); mask arrays are the local [B|1, Tl]
slices. No additive bias and no dense mask (neither has a meaning split across devices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from transformer_jax.ops.chunked_attention import _check_qkv, _forward, _pad_mask, block_grads, chunked_attention
from transformer_jax.ops.masks import AttentionMask, _as_2d
from transformer_jax.ops.softcap import check_cap

LAYOUTS = ("zigzag", "contiguous")


def zigzag_perm(T: int, n: int) -> np.ndarray:
    """Indices ``perm`` [T] such that ``x[:, perm]`` is the zigzag layout of a [B, T] sequence over n
    devices (device i holds chunks i and 2n-1-i of 2n); ``np.argsort(perm)`` undoes it."""
    if T % (2 * n):
        raise ValueError(f"the zigzag layout needs a length divisible by 2 x {n} devices; got T={T}")
    chunks = np.arange(T).reshape(2 * n, T // (2 * n))
    return np.concatenate([np.concatenate([chunks[i], chunks[2 * n - 1 - i]]) for i in range(n)])


def layout_index(T_local: int, n: int, index, layout: str = "zigzag") -> Int[Array, " Tl"]:
    """Global sequence position of each of the T_local tokens of device ``index`` (may be traced) of n."""
    if layout == "contiguous":
        return index * T_local + jnp.arange(T_local, dtype=jnp.int32)
    if layout != "zigzag":
        raise ValueError(f"layout={layout!r}; expected one of {LAYOUTS}")
    if T_local % 2:
        raise ValueError(f"the zigzag layout needs an even number of tokens per device; got {T_local}")
    h = T_local // 2
    ar = jnp.arange(h, dtype=jnp.int32)
    return jnp.concatenate([index * h + ar, (2 * n - 1 - index) * h + ar])


def _check(q, k, v, mask: AttentionMask | None, softcap) -> AttentionMask:
    _check_qkv(q, k, v)
    check_cap(softcap)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"context-parallel attention is self-attention: q has {q.shape[1]} rows, k {k.shape[1]}")
    mask = AttentionMask() if mask is None else mask
    if mask.dense is not None:
        raise ValueError("context-parallel attention takes no dense mask; express it by positions, segments, kv_valid")
    mask.validate(q.shape[1], k.shape[1], q.shape[0], q.shape[2])
    return mask


def _local_mask(mask: AttentionMask, T_local: int, axis_name: str, layout: str) -> AttentionMask:
    """``mask`` with every array explicit [B|1, Tl]: positions default to the layout's global ones."""
    n, me = jax.lax.axis_size(axis_name), jax.lax.axis_index(axis_name)
    own = layout_index(T_local, n, me, layout)[None]
    q_seg, kv_seg = mask._segments(T_local, T_local)
    kv_valid = _as_2d(mask.kv_valid)
    return dataclasses.replace(
        mask,
        q_positions=own if mask.q_positions is None else _as_2d(mask.q_positions),
        kv_positions=own if mask.kv_positions is None else _as_2d(mask.kv_positions),
        q_segment_ids=q_seg,
        kv_segment_ids=kv_seg,
        kv_valid=jnp.ones((1, T_local), bool) if kv_valid is None else kv_valid.astype(bool),
    )


def _kv_part(mask: AttentionMask):
    return mask.kv_positions, mask.kv_segment_ids, mask.kv_valid


def _with_kv(mask: AttentionMask, part) -> AttentionMask:
    return dataclasses.replace(mask, kv_positions=part[0], kv_segment_ids=part[1], kv_valid=part[2])


def _rotate(tree, axis_name: str, n: int):
    """Each device sends ``tree`` to the next one on the ring (i -> i + 1 mod n)."""
    perm = [(i, (i + 1) % n) for i in range(n)]
    return jax.tree.map(lambda x: jax.lax.ppermute(x, axis_name, perm), tree)


def _rows(lse):
    """[nq, B, K, G, bq] (the blockwise kernel's lse) -> [B, Tp, K, G] (the output's row order)."""
    nq, B, K, G, bq = lse.shape
    return jnp.moveaxis(lse, 0, 3).reshape(B, K, G, nq * bq).transpose(0, 3, 1, 2)


def _ring_forward(q, k, v, mask, scaling, bq, bk, axis_name):
    n = jax.lax.axis_size(axis_name)

    def step(carry, _):
        k_cur, v_cur, kv, out, lse = carry
        out_j, lse_j = _forward(q, k_cur, v_cur, None, _with_kv(mask, kv), scaling, bq, bk)
        new = jnp.logaddexp(lse, lse_j)
        safe = jnp.where(jnp.isfinite(new), new, 0.0)
        w_old, w_j = jnp.exp(_rows(lse - safe))[..., None], jnp.exp(_rows(lse_j - safe))[..., None]
        out = w_old * out + w_j * out_j
        k_cur, v_cur, kv = _rotate((k_cur, v_cur, kv), axis_name, n)
        return (k_cur, v_cur, kv, out, new), None

    B, Tp, K, G, D = q.shape
    init = (
        k,
        v,
        _kv_part(mask),
        jnp.zeros(q.shape, jnp.float32),
        jnp.full((Tp // bq, B, K, G, bq), -jnp.inf, jnp.float32),
    )
    (_, _, _, out, lse), _ = jax.lax.scan(step, init, None, length=n)
    return out, lse


def _ring(q, k, v, mask, scaling, bq, bk, axis_name):
    return _ring_forward(q, k, v, mask, scaling, bq, bk, axis_name)[0]


def _ring_fwd(q, k, v, mask, scaling, bq, bk, axis_name):
    out, lse = _ring_forward(q, k, v, mask, scaling, bq, bk, axis_name)
    return out, (q, k, v, mask, out, lse)


def _ring_bwd(scaling, bq, bk, axis_name, res, d_out):
    q, k, v, mask, out, lse = res
    n = jax.lax.axis_size(axis_name)

    def step(carry, _):
        k_cur, v_cur, kv, dk, dv, dq = carry
        res_j = (q, k_cur, v_cur, None, _with_kv(mask, kv), out, lse)
        dq_j, dk_j, dv_j, _ = block_grads(scaling, bq, bk, res_j, d_out)
        k_cur, v_cur, kv, dk, dv = _rotate((k_cur, v_cur, kv, dk + dk_j, dv + dv_j), axis_name, n)
        return (k_cur, v_cur, kv, dk, dv, dq + dq_j), None

    zeros = jnp.zeros(k.shape, jnp.float32)
    init = (k, v, _kv_part(mask), zeros, zeros, jnp.zeros(q.shape, jnp.float32))
    (_, _, _, dk, dv, dq), _ = jax.lax.scan(step, init, None, length=n)  # n moves: dK, dV are home
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_ring = jax.custom_vjp(_ring, nondiff_argnums=(4, 5, 6, 7))
_ring.defvjp(_ring_fwd, _ring_bwd)


def ring_attention(
    q_BTHD: Float[Array, "B Tl H D"],
    k_BSKD: Float[Array, "B Tl K D"],
    v_BSKD: Float[Array, "B Tl K D"],
    *,
    axis_name: str,
    mask: AttentionMask | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    block_size: int = 512,
    layout: str = "zigzag",
) -> Float[Array, "B Tl H D"]:
    """softmax(softcap(Q K^T * scale), masked) V of the local queries over the whole sequence, K/V
    passed around the ring of ``axis_name`` (see the module docstring). Call inside ``shard_map``
    with ``axis_name`` manual; differentiable in q, k, v (a ring in the backward pass too)."""
    mask = _check(q_BTHD, k_BSKD, v_BSKD, mask, softcap)
    B, T, H, D = q_BTHD.shape
    K = k_BSKD.shape[2]
    scale = float(D**-0.5 if scale is None else scale)
    bq = min(block_size, T)
    Tp = -(-T // bq) * bq
    local = _pad_mask(_local_mask(mask, T, axis_name, layout), T, T, Tp, Tp)  # padded keys: kv_valid False
    pad = ((0, 0), (0, Tp - T), (0, 0), (0, 0))
    q = jnp.pad(q_BTHD, pad).reshape(B, Tp, K, H // K, D)
    k, v = jnp.pad(k_BSKD, pad), jnp.pad(v_BSKD, pad)
    out = _ring(q, k, v, local, (scale, None if softcap is None else float(softcap)), bq, bq, axis_name)
    return out.reshape(B, Tp, H, D)[:, :T].astype(q_BTHD.dtype)


Attend = Callable[..., Array]  # attend(q, k, v, *, mask) -> out, e.g. a partial of ops.attention.attention


def all_gather_attention(
    q_BTHD: Float[Array, "B Tl H D"],
    k_BSKD: Float[Array, "B Tl K D"],
    v_BSKD: Float[Array, "B Tl K D"],
    *,
    axis_name: str,
    mask: AttentionMask | None = None,
    layout: str = "zigzag",
    attend: Attend | None = None,
    softcap: float | None = None,
) -> Float[Array, "B Tl H D"]:
    """The local queries against all T keys gathered over ``axis_name`` (key-side mask arrays
    gathered with them, positions explicit): ``attend(q, k_all, v_all, mask=...)`` (default
    `ops.chunked_attention`, with ``softcap``). Call inside ``shard_map`` with ``axis_name`` manual."""
    mask = _check(q_BTHD, k_BSKD, v_BSKD, mask, softcap)
    T = q_BTHD.shape[1]
    local = _local_mask(mask, T, axis_name, layout)
    gather = lambda x: jax.lax.all_gather(x, axis_name, axis=1, tiled=True)
    full = _with_kv(local, jax.tree.map(gather, _kv_part(local)))
    if attend is None:
        return chunked_attention(q_BTHD, gather(k_BSKD), gather(v_BSKD), mask=full, softcap=softcap)
    return attend(q_BTHD, gather(k_BSKD), gather(v_BSKD), mask=full)
