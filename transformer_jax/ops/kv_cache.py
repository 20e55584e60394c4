"""A preallocated key/value cache for autoregressive decoding (pure pytree, update, attention).

Decoding with a cache turns generation from O(n^2) recomputation into O(n) work per token:
keys/values of past positions are stored once and only the new tokens are projected.

Keys and values are stored head-major with the slot axis last, ``[B, K, D, S]``: the layout in
which the decode step's products ``q k^T`` and ``p v`` read the cache as it lies. Stored as
``[B, S, K, D]``, XLA on CPU copied the whole cache into this layout in every step, which cost
about half of a batch-8 decode step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from transformer_jax.ops.softcap import softcap as _softcap


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys/values of S slots, ``[B, K, D, S]`` (stacked caches of ``scan_layers`` models carry a
    leading layer axis); ``index`` = number of slots already written (same for the batch)."""

    k_BKDS: Float[Array, "B K D S"]
    v_BKDS: Float[Array, "B K D S"]
    index: Int[Array, ""]

    @property
    def max_len(self) -> int:
        return self.k_BKDS.shape[-1]

    def keys_values(self) -> tuple[Float[Array, "B S K D"], Float[Array, "B S K D"]]:
        """Keys and values as ``[B, S, K, D]`` (the layout of ``ops.attention``)."""
        return jnp.moveaxis(self.k_BKDS, -1, -3), jnp.moveaxis(self.v_BKDS, -1, -3)


def _slots_last(x_BTKD: Array) -> Array:
    return jnp.moveaxis(x_BTKD, -3, -1)


def kv_cache_of(k_BSKD: Float[Array, "B S K D"], v_BSKD: Float[Array, "B S K D"]) -> KVCache:
    """A full cache holding these keys/values (e.g. a cross-attention memory)."""
    return KVCache(
        k_BKDS=_slots_last(k_BSKD), v_BKDS=_slots_last(v_BSKD), index=jnp.asarray(k_BSKD.shape[-3], jnp.int32)
    )


def init_kv_cache(
    batch: int, max_len: int, n_kv_heads: int, head_dim: int, dtype=jnp.float32, *, value_dim: int | None = None
) -> KVCache:
    """An empty cache of ``max_len`` slots; values of ``value_dim`` dims (None: ``head_dim``). MLA
    (``ops.mla``) keeps its RoPE key as the one key head and its latent as the one value head."""
    keys = jnp.zeros((batch, n_kv_heads, head_dim, max_len), dtype)
    values = keys if value_dim is None else jnp.zeros((batch, n_kv_heads, value_dim, max_len), dtype)
    return KVCache(k_BKDS=keys, v_BKDS=values, index=jnp.zeros((), jnp.int32))


def update_kv_cache(cache: KVCache, k_BTKD: Float[Array, "B T K D"], v_BTKD: Float[Array, "B T K D"]) -> KVCache:
    """Writes T new keys/values at slots [index, index + T) and advances ``index`` by T."""
    start = (0, 0, 0, cache.index)
    k = jax.lax.dynamic_update_slice(cache.k_BKDS, _slots_last(k_BTKD).astype(cache.k_BKDS.dtype), start)
    v = jax.lax.dynamic_update_slice(cache.v_BKDS, _slots_last(v_BTKD).astype(cache.v_BKDS.dtype), start)
    return KVCache(k_BKDS=k, v_BKDS=v, index=cache.index + k_BTKD.shape[1])


def weighted_values(p_BKGTS: Float[Array, "B K G T S"], v_BKDS: Float[Array, "B K D S"]) -> Float[Array, "B K G T D"]:
    """``out[b, k, g, t] = sum_s p[b, k, g, t, s] v[b, k, :, s]``. For a few queries (G T <= D) it is
    stated as V P^T, both operands contracting their minor axis, so that XLA:CPU transposes the
    small P rather than copying V's [D, S] transposed (see docs/performance.md)."""
    B, K, G, T, S = p_BKGTS.shape
    D = v_BKDS.shape[2]
    if G * T > D:
        return jnp.einsum("bkgts,bkds->bkgtd", p_BKGTS, v_BKDS)
    dims = (((2,), (2,)), ((0,), (0,)))
    out = jax.lax.dot_general(v_BKDS.reshape(B * K, D, S), p_BKGTS.reshape(B * K, G * T, S), dims)
    return jnp.swapaxes(out, 1, 2).reshape(B, K, G, T, D)


def cached_attention(
    q_BTHD: Float[Array, "B T H D"],
    cache: KVCache,
    *,
    mask_BHTS: Bool[Array, "B|1 H|1 T S"] | None = None,
    bias_BHTS: Float[Array, "B|1 H|1 T S"] | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    qv_BTHE: Float[Array, "B T H E"] | None = None,
) -> Float[Array, "B T H E"]:
    """softmax(softcap(q k^T * scale) + bias, masked) v over the cache's S slots, read in its stored
    layout; query heads H = K * G share key/value head h // G (GQA). ``scale`` defaults to
    1/sqrt(D); softmax in float32; a query that sees no slot gets 0. Equals ``ops.attention``
    (kind ``softmax``) on ``cache.keys_values()``. ``qv_BTHE``: queries scored against the
    values too, logits = q k^T + qv v^T (MLA's absorbed attention, ``ops.mla``; E = the value dim)."""
    B, T, H, D = q_BTHD.shape
    K, E = cache.k_BKDS.shape[1], cache.v_BKDS.shape[2]
    scale = float(D**-0.5) if scale is None else scale  # float(): int ** float is typed Any
    logits = key_logits(q_BTHD, cache.k_BKDS, qv_BTHE, cache.v_BKDS)
    logits = _softcap(logits.astype(jnp.float32) * scale, softcap)

    def grouped(x_BHTS):  # [B|1, H|1, T, S] -> [B|1, K|1, G|1, T, S]
        if x_BHTS.shape[1] == 1:
            return x_BHTS[:, :, None]
        return x_BHTS.reshape(x_BHTS.shape[0], K, H // K, *x_BHTS.shape[2:])

    if bias_BHTS is not None:
        logits = logits + grouped(bias_BHTS.astype(jnp.float32))
    if mask_BHTS is not None:
        mask = grouped(mask_BHTS)
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    p = jax.nn.softmax(logits, axis=-1)
    if mask_BHTS is not None:
        p = jnp.where(jnp.any(mask, axis=-1, keepdims=True), p, 0.0)
    out_BKGTE = weighted_values(p.astype(q_BTHD.dtype), cache.v_BKDS.astype(q_BTHD.dtype))
    return jnp.moveaxis(out_BKGTE, 3, 1).reshape(B, T, H, E)


def grouped_queries(q_BTHD: Float[Array, "B T H D"], K: int) -> Float[Array, "B K G T D"]:
    """Query head h = k * G + g as [B, K, G, T, D]."""
    B, T, H, D = q_BTHD.shape
    return jnp.moveaxis(q_BTHD.reshape(B, T, K, H // K, D), 1, 3)


def key_logits(q_BTHD, k_BKDs, qv_BTHE=None, v_BKEs=None) -> Float[Array, "B K G T s"]:
    """q k^T over s cached slots (+ qv v^T when ``qv_BTHE`` is given), in q's dtype."""
    K = k_BKDs.shape[1]
    logits = jnp.einsum("bkgtd,bkds->bkgts", grouped_queries(q_BTHD, K), k_BKDs.astype(q_BTHD.dtype))
    if qv_BTHE is not None:
        assert v_BKEs is not None
        logits = logits + jnp.einsum("bkgte,bkes->bkgts", grouped_queries(qv_BTHE, K), v_BKEs.astype(q_BTHD.dtype))
    return logits
