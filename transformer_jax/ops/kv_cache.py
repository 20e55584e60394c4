"""A preallocated key/value cache for autoregressive decoding (pure pytree + update function).

Decoding with a cache turns generation from O(n^2) recomputation into O(n) work per token:
keys/values of past positions are stored once and only the new tokens are projected.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys/values for S slots; ``index`` = number of slots already written (same for the batch)."""

    k: Float[Array, "B S K D"]
    v: Float[Array, "B S K D"]
    index: Int[Array, ""]

    @property
    def max_len(self) -> int:
        return self.k.shape[1]


def init_kv_cache(batch: int, max_len: int, n_kv_heads: int, head_dim: int, dtype=jnp.float32) -> KVCache:
    """An empty cache of ``max_len`` slots."""
    zeros = jnp.zeros((batch, max_len, n_kv_heads, head_dim), dtype)
    return KVCache(k=zeros, v=zeros, index=jnp.zeros((), jnp.int32))


def update_kv_cache(cache: KVCache, k_BTKD: Float[Array, "B T K D"], v_BTKD: Float[Array, "B T K D"]) -> KVCache:
    """Writes T new keys/values at slots [index, index + T) and advances ``index`` by T."""
    start = (0, cache.index, 0, 0)
    k = jax.lax.dynamic_update_slice(cache.k, k_BTKD.astype(cache.k.dtype), start)
    v = jax.lax.dynamic_update_slice(cache.v, v_BTKD.astype(cache.v.dtype), start)
    return KVCache(k=k, v=v, index=cache.index + k_BTKD.shape[1])
