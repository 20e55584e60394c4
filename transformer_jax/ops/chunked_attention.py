"""Blockwise (FlashAttention-style) softmax attention in pure JAX, any backend.

Forward (Dao et al. 2022, "FlashAttention"): for each query block, an online softmax over key
blocks keeps a running max m, running sum l and an unnormalised accumulator, so only one
(tq, tk) tile of logits exists at a time. Backward (Dao 2023, "FlashAttention-2") recomputes each
tile's probabilities P = exp(S - lse) from the saved logsumexp and, with D = rowsum(dO * O):
dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = scale * dS K, dK = scale * dS^T Q, dBias = dS.
With a soft cap S = c tanh(S_raw / c) (Gemma 2), dS_raw = dS * (1 - (S / c)^2) feeds dQ and dK.
Memory is O(T * block) in both passes. Tiles with no visible key are skipped.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from transformer_jax.ops.masks import AttentionMask, _as_2d, _as_4d, _slice_last
from transformer_jax.ops.softcap import check_cap, softcap_grad
from transformer_jax.ops.softcap import softcap as _softcap


def chunked_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    *,
    mask: AttentionMask | None = None,
    bias: Float[Array, "B|1 H|1 T|1 S|1"] | None = None,
    scale: float | None = None,
    block_size: int = 512,
    softcap: float | None = None,
) -> Float[Array, "B T H D"]:
    """softmax(softcap(Q K^T * scale) + bias, masked) V computed in (block_size x block_size) tiles.

    K kv heads serve H = K * G query heads (GQA/MQA); T != S is allowed and neither needs to be
    a multiple of block_size (inputs are padded internally). Query rows with no visible key
    give 0 and zero gradients. Differentiable wrt q, k, v and bias. ``softcap``: cap * tanh(s / cap)
    on the scaled logits (None: off). Jitted (scale, block_size and softcap static), so eager calls
    reuse the compiled kernel.
    """
    _check_qkv(q_BTHD, k_BSKD, v_BSKD)
    D = q_BTHD.shape[-1]
    scale = float(1.0 / D**0.5 if scale is None else scale)
    check_cap(softcap)
    softcap = None if softcap is None else float(softcap)
    return _chunked_attention(
        q_BTHD, k_BSKD, v_BSKD, mask=mask, bias=bias, scale=scale, block_size=block_size, softcap=softcap
    )


@functools.partial(jax.jit, static_argnames=("scale", "block_size", "softcap"))
def _chunked_attention(q_BTHD, k_BSKD, v_BSKD, *, mask, bias, scale: float, block_size: int, softcap: float | None):
    B, T, H, D = q_BTHD.shape
    _, S, K, _ = k_BSKD.shape
    G = H // K
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")
    bq, bk = min(block_size, T), min(block_size, S)
    Tp, Sp = -(-T // bq) * bq, -(-S // bk) * bk

    mask = AttentionMask() if mask is None else mask
    mask.validate(T, S, B, H)
    mask = _pad_mask(mask, T, S, Tp, Sp)
    q = jnp.pad(q_BTHD, ((0, 0), (0, Tp - T), (0, 0), (0, 0))).reshape(B, Tp, K, G, D)
    k = jnp.pad(k_BSKD, ((0, 0), (0, Sp - S), (0, 0), (0, 0)))
    v = jnp.pad(v_BSKD, ((0, 0), (0, Sp - S), (0, 0), (0, 0)))
    if bias is not None:
        bias = _as_4d(bias)
        want = (B, H, T, S)
        if any(d not in (1, w) for d, w in zip(bias.shape, want)):
            raise ValueError(f"bias has shape {bias.shape}; expected one broadcastable to [B, H, T, S] = {want}")
        pad_T = Tp - T if bias.shape[2] == T else 0
        pad_S = Sp - S if bias.shape[3] == S else 0
        bias = jnp.pad(bias, ((0, 0), (0, 0), (0, pad_T), (0, pad_S)))
    out = _flash(q, k, v, bias, mask, (scale, softcap), bq, bk)
    return out.reshape(B, Tp, H, D)[:, :T].astype(q_BTHD.dtype)  # pyright: ignore[reportAttributeAccessIssue]  # jax.custom_vjp's stubs lose the return type under functools.partial


def _check_qkv(q, k, v) -> None:
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
        raise ValueError(
            "attention expects q [B, T, H, D] and k, v [B, S, K, D] of equal shape; "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {q.shape} and k {k.shape} disagree in batch B or head dim D")
    if q.shape[2] % k.shape[2]:
        raise ValueError(
            f"q has H={q.shape[2]} heads, not a multiple of the K={k.shape[2]} key/value heads; "
            "use H % K == 0 (GQA) or K == 1 (MQA)"
        )


def _pad_mask(mask: AttentionMask, T: int, S: int, Tp: int, Sp: int) -> AttentionMask:
    """Pad every array of `mask` to Tp queries / Sp keys; padded keys are made invisible."""
    q_seg, kv_seg = mask._segments(T, S)

    def pad(x, n, target, value=0):
        return None if x is None else jnp.pad(x, ((0, 0), (0, target - n)), constant_values=value)

    kv_valid = _as_2d(mask.kv_valid)
    if kv_valid is None and Sp > S:
        kv_valid = jnp.ones((1, S), bool)
    dense = None
    if mask.dense is not None:
        dense = _as_4d(mask.dense).astype(bool)
        pad_T = Tp - T if dense.shape[2] == T else 0
        pad_S = Sp - S if dense.shape[3] == S else 0
        dense = jnp.pad(dense, ((0, 0), (0, 0), (0, pad_T), (0, pad_S)))
    return dataclasses.replace(
        mask,
        q_positions=pad(_as_2d(mask.q_positions), T, Tp),
        kv_positions=pad(_as_2d(mask.kv_positions), S, Sp),
        q_segment_ids=pad(q_seg, T, Tp),
        kv_segment_ids=pad(kv_seg, S, Sp),
        kv_valid=None if kv_valid is None else pad(kv_valid.astype(bool), S, Sp, False),
        dense=dense,
    )


def _grouped(x: Array, K: int, G: int) -> Array:
    """[B|1, H|1, tq, tk] -> [B|1, K|1, G|1, tq, tk]."""
    if x.shape[1] == 1:
        return x[:, :, None]
    return x.reshape(x.shape[0], K, G, *x.shape[2:])


def _capped_logits(q_blk, k_blk, scaling):
    """softcap(q k^T * scale) of one tile, [B, K, G, bq, bk]; ``scaling`` = (scale, softcap)."""
    scale, cap = scaling
    s = jnp.einsum("bqkgd,bskd->bkgqs", q_blk, k_blk, preferred_element_type=jnp.float32) * scale
    return _softcap(s, cap)


def _tile_logits(q_blk, k_blk, bias, vis, i, j, scaling, bq, bk):
    """Masked logits of one tile, [B, K, G, bq, bk]; invisible entries are -inf."""
    K, G = q_blk.shape[2], q_blk.shape[3]
    s = _capped_logits(q_blk, k_blk, scaling)
    if bias is not None:
        tile = _slice_last(_slice_last(bias, i * bq, bq, 2), j * bk, bk, 3)
        s = s + _grouped(tile, K, G).astype(jnp.float32)
    return jnp.where(_grouped(vis, K, G), s, -jnp.inf)


def _blocks(x: Array, n: int, axis: int = 1) -> Array:
    """Split `axis` into n blocks and move the block index to the front."""
    x = x.reshape(x.shape[:axis] + (n, x.shape[axis] // n) + x.shape[axis + 1 :])
    return jnp.moveaxis(x, axis, 0)


def _unblocks(x: Array, axis: int = 1) -> Array:
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :])


def _forward(q, k, v, bias, mask, scaling, bq, bk):
    B, Tp, K, G, D = q.shape
    nq, nk = Tp // bq, k.shape[1] // bk
    ks, vs = _blocks(k, nk), _blocks(v, nk)

    def q_block(args):
        i, q_blk = args

        def kv_step(carry, xs):
            j, k_blk, v_blk = xs

            def visit(carry):
                m, l, acc = carry
                s = _tile_logits(q_blk, k_blk, bias, vis, i, j, scaling, bq, bk)
                m_new = jnp.maximum(m, s.max(-1))
                m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
                p = jnp.exp(s - m_safe[..., None])
                corr = jnp.exp(m - m_safe)
                pv = jnp.einsum("bkgqs,bskd->bkgqd", p, v_blk.astype(jnp.float32))
                return m_new, l * corr + p.sum(-1), acc * corr[..., None] + pv

            vis = mask.block(i * bq, bq, j * bk, bk)
            return jax.lax.cond(jnp.any(vis), visit, lambda c: c, carry), None

        init = (
            jnp.full((B, K, G, bq), -jnp.inf, jnp.float32),
            jnp.zeros((B, K, G, bq), jnp.float32),
            jnp.zeros((B, K, G, bq, D), jnp.float32),
        )
        (m, l, acc), _ = jax.lax.scan(kv_step, init, (jnp.arange(nk), ks, vs))
        seen = l > 0
        l_safe = jnp.where(seen, l, 1.0)
        out = jnp.where(seen[..., None], acc / l_safe[..., None], 0.0)
        lse = jnp.where(seen, m + jnp.log(l_safe), -jnp.inf)  # -inf: no visible key (ring merging reads it)
        return jnp.einsum("bkgqd->bqkgd", out), lse

    out, lse = jax.lax.map(q_block, (jnp.arange(nq), _blocks(q, nq)))
    return _unblocks(out), lse  # [B, Tp, K, G, D] float32, [nq, B, K, G, bq]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _flash(q, k, v, bias, mask, scaling, bq, bk):
    return _forward(q, k, v, bias, mask, scaling, bq, bk)[0]


def _flash_fwd(q, k, v, bias, mask, scaling, bq, bk):
    out, lse = _forward(q, k, v, bias, mask, scaling, bq, bk)
    return out, (q, k, v, bias, mask, out, lse)


def _reduce_to(x: Array, shape: tuple[int, ...]) -> Array:
    """Sum `x` over the dims where `shape` is 1 (undo broadcasting), keeping dims."""
    axes = tuple(a for a, (n, d) in enumerate(zip(shape, x.shape)) if n == 1 and d != 1)
    return x.sum(axes, keepdims=True) if axes else x


def _flash_bwd(scaling, bq, bk, res, d_out):
    q, k, v, bias, mask, _, _ = res
    dq, dk, dv, dbias = block_grads(scaling, bq, bk, res, d_out)
    dbias = None if bias is None else dbias.astype(bias.dtype)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbias, None


def block_grads(scaling, bq, bk, res, d_out):
    """float32 (dq, dk, dv, dbias) of q's rows against the keys k, v, given the final ``out`` and
    ``lse`` of those rows (which may have seen other keys too: ring attention sums these per block)."""
    q, k, v, bias, mask, out, lse = res
    scale, cap = scaling
    B, Tp, K, G, D = q.shape
    nq, nk = Tp // bq, k.shape[1] // bk
    lse = jnp.where(jnp.isfinite(lse), lse, 0.0)  # rows with no visible key: p = exp(-inf - 0) = 0
    d_out = d_out.astype(jnp.float32)
    delta = jnp.einsum("bqkgd,bqkgd->bkgq", d_out, out)  # rowsum(dO * O)
    qs, dos, deltas = _blocks(q, nq), _blocks(d_out, nq), _blocks(delta, nq, axis=3)
    dq0 = jnp.zeros(qs.shape, jnp.float32)
    dbias0 = None if bias is None else jnp.zeros(bias.shape, jnp.float32)

    def kv_block(carry, xs):
        j, k_blk, v_blk = xs

        def q_step(inner, ys):
            i, q_blk, do_blk, lse_blk, delta_blk = ys

            def visit(inner):
                dk, dv, dq, dbias = inner
                s = _tile_logits(q_blk, k_blk, bias, vis, i, j, scaling, bq, bk)
                p = jnp.exp(s - lse_blk[..., None])
                dv = dv + jnp.einsum("bkgqs,bqkgd->bskd", p, do_blk)
                dp = jnp.einsum("bqkgd,bskd->bkgqs", do_blk, v_blk.astype(jnp.float32))
                ds = p * (dp - delta_blk[..., None])
                ds_raw = ds if cap is None else ds * softcap_grad(_capped_logits(q_blk, k_blk, scaling), cap)
                dk = dk + scale * jnp.einsum("bkgqs,bqkgd->bskd", ds_raw, q_blk.astype(jnp.float32))
                dq_i = scale * jnp.einsum("bkgqs,bskd->bqkgd", ds_raw, k_blk.astype(jnp.float32))
                dq = jax.lax.dynamic_update_index_in_dim(
                    dq, jax.lax.dynamic_index_in_dim(dq, i, keepdims=False) + dq_i, i, 0
                )
                if dbias is not None:
                    dbias = _add_bias_tile(dbias, ds, i, j, bq, bk)
                return dk, dv, dq, dbias

            vis = mask.block(i * bq, bq, j * bk, bk)
            return jax.lax.cond(jnp.any(vis), visit, lambda c: c, inner), None

        dq, dbias = carry
        zeros = jnp.zeros((B, bk, K, D), jnp.float32)
        (dk, dv, dq, dbias), _ = jax.lax.scan(q_step, (zeros, zeros, dq, dbias), (jnp.arange(nq), qs, dos, lse, deltas))
        return (dq, dbias), (dk, dv)

    (dq, dbias), (dks, dvs) = jax.lax.scan(kv_block, (dq0, dbias0), (jnp.arange(nk), _blocks(k, nk), _blocks(v, nk)))
    return _unblocks(dq), _unblocks(dks), _unblocks(dvs), dbias


def _add_bias_tile(dbias, ds, i, j, bq, bk):
    """dbias[..., tile(i, j)] += ds summed over the dims that `dbias` broadcasts."""
    Bb, Hb, Tb, Sb = dbias.shape
    ds = ds.reshape(ds.shape[0], -1, bq, bk)  # [B, H, bq, bk]
    ds = _reduce_to(ds, (Bb, Hb, 1 if Tb == 1 else bq, 1 if Sb == 1 else bk))
    start = (0, 0, 0 if Tb == 1 else i * bq, 0 if Sb == 1 else j * bk)
    old = jax.lax.dynamic_slice(dbias, start, ds.shape)
    return jax.lax.dynamic_update_slice(dbias, old + ds, start)


_flash.defvjp(_flash_fwd, _flash_bwd)
