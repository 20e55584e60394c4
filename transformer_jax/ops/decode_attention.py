"""Attention of T new queries over a KV cache, by name: DECODE_IMPLS -- dense | blocked | pallas_gpu | auto.

Every implementation computes the same thing: softmax(softcap(q k^T * scale) + bias) v over the cache slots
that are **written** (slot s < cache.index) and visible under ``mask`` (an ``AttentionMask`` whose
key positions are slot indices), softmax in float32, 0 for a query that sees nothing:

- ``dense``: every one of the S preallocated slots is read and the unwritten ones masked
  (``kv_cache.cached_attention``); a step at position 64 of a 2,048-slot cache costs what a step
  at 2,048 costs.
- ``blocked``: the written prefix only, in blocks of ``block_size`` slots with an online softmax
  (Milakov & Gimelshein 2018; flash-decoding's split-K, Dao et al. 2023, run sequentially): the
  loop stops at the block holding slot index - 1 and, under a sliding window with default key
  positions, starts at the first block the window reaches. Cost grows with the position, not the
  buffer. Forward only (the trip count is data-dependent).
- ``pallas_gpu``: the Triton flash-decoding kernel (``ops.pallas_decode``), T = 1, no bias, causal
  masks with an optional window.
- ``auto``: pallas_gpu on a GPU where it applies; blocked on CPU; dense elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from transformer_jax.core import targets
from transformer_jax.core.registry import Registry
from transformer_jax.ops.kv_cache import KVCache, cached_attention, key_logits, weighted_values
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.pallas_decode import flash_decode_attention
from transformer_jax.ops.softcap import check_cap
from transformer_jax.ops.softcap import softcap as _softcap

DECODE_IMPLS: Registry[Callable[..., Array]] = Registry("decode attention implementation")
_NEG = float(jnp.finfo(jnp.float32).min)
# slots per block of ``blocked``, chosen by `bench decode`'s fixed_over_sized (figures: CHANGELOG)
DECODE_BLOCK_SIZE = 128
_BS = DECODE_BLOCK_SIZE


def decode_attention(
    q_BTHD: Float[Array, "B T H D"],
    cache: KVCache,
    *,
    mask: AttentionMask | None = None,
    bias_BHTS: Float[Array, "B|1 H|1 T S"] | None = None,
    scale: float | None = None,
    impl: str = "auto",
    block_size: int = DECODE_BLOCK_SIZE,
    softcap: float | None = None,
    qv_BTHE: Float[Array, "B T H E"] | None = None,
) -> Float[Array, "B T H E"]:
    """Attention over the written, visible cache slots run by DECODE_IMPLS[impl]; H = K * G (GQA);
    ``softcap``: Gemma 2's cap * tanh(logits / cap) on the scaled logits (None: off). ``qv_BTHE``:
    queries scored against the cached values as well, logits = q k^T + qv v^T (MLA's absorbed
    attention over its latent, ``ops.mla``); the output has the values' dim E."""
    if mask is not None:
        mask.validate(q_BTHD.shape[1], cache.max_len, q_BTHD.shape[0], q_BTHD.shape[2])
    check_cap(softcap)
    kwargs = {} if qv_BTHE is None else {"qv_BTHE": qv_BTHE}
    return DECODE_IMPLS.get(impl)(
        q_BTHD, cache, mask=mask, bias_BHTS=bias_BHTS, scale=scale, block_size=block_size, softcap=softcap, **kwargs
    )


@DECODE_IMPLS.register("dense")
def dense_decode(
    q_BTHD, cache: KVCache, *, mask=None, bias_BHTS=None, scale=None, block_size=_BS, softcap=None, qv_BTHE=None
):
    """All S slots read, unwritten and invisible ones masked (``kv_cache.cached_attention``)."""
    T, S = q_BTHD.shape[1], cache.max_len
    written_11TS = jnp.broadcast_to(jnp.arange(S) < cache.index, (1, 1, T, S))
    visible = written_11TS if mask is None else mask.materialize(T, S) & written_11TS
    return cached_attention(
        q_BTHD, cache, mask_BHTS=visible, bias_BHTS=bias_BHTS, scale=scale, softcap=softcap, qv_BTHE=qv_BTHE
    )


def _grouped(x_BHTS: Array, K: int) -> Array:
    """[B|1, H|1, T, s] -> [B|1, K|1, G|1, T, s] (query head h = k * G + g)."""
    if x_BHTS.shape[1] == 1:
        return x_BHTS[:, :, None]
    return x_BHTS.reshape(x_BHTS.shape[0], K, x_BHTS.shape[1] // K, *x_BHTS.shape[2:])


def _first_slot(mask: AttentionMask | None, S: int) -> Array:
    """The lowest slot a windowed mask lets any query see (0 when that cannot be bounded)."""
    if mask is None or mask.window is None or mask.q_positions is None or mask.kv_positions is not None:
        return jnp.zeros((), jnp.int32)
    lowest = jnp.min(jnp.asarray(mask.q_positions)) - mask.window + 1
    return jnp.clip(lowest, 0, S).astype(jnp.int32)


@DECODE_IMPLS.register("blocked", reads=("block_size",))
def blocked_decode(
    q_BTHD, cache: KVCache, *, mask=None, bias_BHTS=None, scale=None, block_size=_BS, softcap=None, qv_BTHE=None
):
    """Online softmax over blocks [lo, ceil(index / n)) of n = min(block_size, S) slots; the last
    block is shifted to end at S (its slots before the block boundary are skipped, not re-read).
    A cache of at most one block is read whole, still inside the loop: read directly in the step
    that writes it, XLA:CPU copied the whole cache every step (see docs/performance.md)."""
    B, T, H, D = q_BTHD.shape
    K, E, S = cache.k_BKDS.shape[1], cache.v_BKDS.shape[2], cache.max_len
    n = min(block_size, S)
    scale = float(D**-0.5) if scale is None else scale

    def body(b, carry):
        m, l, acc = carry
        start = jnp.minimum(b * n, S - n)
        k_BKDn = jax.lax.dynamic_slice_in_dim(cache.k_BKDS, start, n, axis=3).astype(q_BTHD.dtype)
        v_BKDn = jax.lax.dynamic_slice_in_dim(cache.v_BKDS, start, n, axis=3).astype(q_BTHD.dtype)
        s = _softcap(key_logits(q_BTHD, k_BKDn, qv_BTHE, v_BKDn).astype(jnp.float32) * scale, softcap)
        if bias_BHTS is not None:
            s = s + _grouped(jax.lax.dynamic_slice_in_dim(bias_BHTS, start, n, axis=3).astype(jnp.float32), K)
        slot_n = start + jnp.arange(n)
        visible: Bool[Array, "..."] = ((slot_n >= b * n) & (slot_n < cache.index))[None, None, None, None]
        if mask is not None:
            visible = visible & _grouped(mask.block(0, T, start, n), K)
        s = jnp.where(visible, s, _NEG)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        p = jnp.where(visible, jnp.exp(s - m_new), 0.0)
        correction = jnp.exp(m - m_new)
        pv = weighted_values(p.astype(q_BTHD.dtype), v_BKDn).astype(jnp.float32)
        return m_new, l * correction + jnp.sum(p, axis=-1, keepdims=True), acc * correction + pv

    shape = (B, K, H // K, T)
    init = (jnp.full((*shape, 1), _NEG), jnp.zeros((*shape, 1)), jnp.zeros((*shape, E)))
    lo = _first_slot(mask, S) // n
    hi = (jnp.minimum(cache.index, S) + n - 1) // n
    _, l, acc = jax.lax.fori_loop(lo, hi, body, init)
    out_BKGTD = jnp.where(l > 0, acc / jnp.where(l > 0, l, 1.0), 0.0)
    return jnp.moveaxis(out_BKGTD, 3, 1).reshape(B, T, H, E).astype(q_BTHD.dtype)


def pallas_decode_problems(
    mask: AttentionMask | None, has_bias: bool, T: int, S: int, softcap: float | None = None, latent: bool = False
) -> list[str]:
    """What keeps these inputs from the flash-decoding kernel (empty: it applies); ``latent``: an
    MLA query against the values (``qv_BTHE``)."""
    problems = [] if softcap is None else [f"a logit soft cap ({softcap})"]
    if latent:
        problems.append("an MLA latent query (qv_BTHE)")
    if T != 1:
        problems.append(f"{T} queries (it decodes one token)")
    if has_bias:
        problems.append("an additive bias (ALiBi / relative positions)")
    if S % 16:
        problems.append(f"a cache of {S} slots (not a multiple of 16)")
    if mask is not None:
        if not mask.causal:
            problems.append("a non-causal mask")
        if mask.q_positions is None:
            problems.append("a mask without q_positions")
        named = ("kv_positions", "q_segment_ids", "kv_segment_ids", "kv_valid", "dense")
        problems += [f"mask.{f}" for f in named if getattr(mask, f) is not None]
    return problems


@DECODE_IMPLS.register("pallas_gpu")
def pallas_gpu_decode(
    q_BTHD, cache: KVCache, *, mask=None, bias_BHTS=None, scale=None, block_size=_BS, softcap=None, qv_BTHE=None
):
    """``ops.pallas_decode.flash_decode_attention`` (GPU); per-row key range from the query positions."""
    T, S, latent = q_BTHD.shape[1], cache.max_len, qv_BTHE is not None
    problems = pallas_decode_problems(mask, bias_BHTS is not None, T, S, softcap, latent)
    if problems:
        raise ValueError(f"decode_impl='pallas_gpu' cannot take {', '.join(problems)}; use 'blocked' or 'auto'")
    if targets.platform() != "gpu":
        raise ValueError(
            f"decode_impl='pallas_gpu' needs a GPU, but the program is compiled for {targets.platform()!r}; "
            "use 'auto', 'blocked' or 'dense'"
        )
    return flash_decode_attention(q_BTHD, cache, scale=scale, **kv_range(mask, cache))


def kv_range(mask: AttentionMask | None, cache: KVCache) -> dict:
    """The kernel's per-row key range [start, length) for one query under a causal (windowed) mask."""
    if mask is None or mask.q_positions is None:
        return {}
    length_B = jnp.asarray(mask.q_positions)[:, -1].astype(jnp.int32) + 1
    length_B = jnp.minimum(length_B, cache.index)
    start_B = None if mask.window is None else jnp.maximum(length_B - mask.window, 0)
    return {"kv_len_B": length_B, "start_B": start_B}


def resolve_decode_impl(
    backend: str,
    mask: AttentionMask | None,
    has_bias: bool,
    T: int,
    S: int,
    softcap: float | None = None,
    latent: bool = False,
) -> str:
    """The DECODE_IMPLS name ``auto`` runs on ``backend`` ("cpu" | "gpu" | "tpu")."""
    if backend == "gpu" and not pallas_decode_problems(mask, has_bias, T, S, softcap, latent):
        return "pallas_gpu"
    return "blocked" if backend == "cpu" else "dense"


@DECODE_IMPLS.register("auto", reads=("block_size",))
def auto_decode(
    q_BTHD, cache: KVCache, *, mask=None, bias_BHTS=None, scale=None, block_size=_BS, softcap=None, qv_BTHE=None
):
    """DECODE_IMPLS[resolve_decode_impl(core.targets.platform(), ...)]."""
    T, S, latent = q_BTHD.shape[1], cache.max_len, qv_BTHE is not None
    name = resolve_decode_impl(targets.platform(), mask, bias_BHTS is not None, T, S, softcap, latent)
    kwargs = {} if qv_BTHE is None else {"qv_BTHE": qv_BTHE}
    return DECODE_IMPLS.get(name)(
        q_BTHD, cache, mask=mask, bias_BHTS=bias_BHTS, scale=scale, block_size=block_size, softcap=softcap, **kwargs
    )
