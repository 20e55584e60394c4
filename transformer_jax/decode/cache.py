"""Batch-row operations on the models' per-layer KV caches (for beam search).

A cache is what ``DecoderLM.init_cache`` / ``EncoderDecoder.init_cache`` return: a list of
per-layer dicts ``{"self": KVCache, ["cross": KVCache]}``, or (``scan_layers``) one dict whose
arrays carry a leading layer axis. Keys/values hold the batch on axis 0 (list) or 1 (stacked);
the fill ``index`` is shared by the batch and is never touched here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from transformer_jax.ops.kv_cache import KVCache


def map_cache_rows(cache, fn: Callable[[Array, int], Array], *, names: tuple[str, ...] = ("self", "cross")):
    """``fn(array, batch_axis)`` applied to the keys and values of the KVCache entries named in
    ``names``; any other array with a batch axis (e.g. a recurrent baseline's state, batch
    first) is mapped too."""
    axis = 0 if isinstance(cache, list) else 1

    def kv(c: KVCache) -> KVCache:
        return KVCache(k_BKDS=fn(c.k_BKDS, axis), v_BKDS=fn(c.v_BKDS, axis), index=c.index)

    def other(x):
        return fn(x, 0) if getattr(x, "ndim", 0) >= 1 else x

    def entry(name, c):
        if isinstance(c, KVCache):
            return kv(c) if name in names else c
        return jax.tree.map(other, c)

    def layer(d):
        return {name: entry(name, c) for name, c in d.items()} if isinstance(d, dict) else jax.tree.map(other, d)

    return [layer(d) for d in cache] if isinstance(cache, list) else layer(cache)


def repeat_rows(cache, n: int):
    """Every batch row repeated ``n`` times in place: rows [b0, b0, .., b1, b1, ..] (beams of b)."""
    return map_cache_rows(cache, lambda x, axis: jnp.repeat(x, n, axis=axis))


def gather_rows(cache, rows_R: Int[Array, " R"], *, names: tuple[str, ...] = ("self",)):
    """Row ``rows_R[r]`` of the entries in ``names`` moved to row r (beam reordering). The
    cross-attention entries are equal within a source's beams, so beam search leaves them."""
    return map_cache_rows(cache, lambda x, axis: jnp.take(x, rows_R, axis=axis), names=names)


def rewind(cache, index):
    """The cache with every entry's fill ``index`` set to ``index`` (a scalar, traced or not):
    slots from there on count as empty and the next write lands there (speculative decoding's
    rollback of rejected draft tokens). Nothing is copied or cleared; stale slots are overwritten
    before any query can see them, because a write of T tokens precedes their attention."""
    has_index = lambda x: dataclasses.is_dataclass(x) and hasattr(x, "index")

    def reset(c):
        if not has_index(c):
            return c
        return dataclasses.replace(c, index=jnp.broadcast_to(jnp.asarray(index, c.index.dtype), c.index.shape))

    return jax.tree.map(reset, cache, is_leaf=has_index)
