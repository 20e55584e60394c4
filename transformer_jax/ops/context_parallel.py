"""Context parallelism under the surrounding mesh: attention over a sequence split on ``context``.

When the mesh of ``jax.set_mesh`` has a ``context`` axis of n > 1 devices (and we are not inside a
``shard_map`` already), every [B, T, ...] activation's T dimension is split over it in the zigzag
layout of `ops.ring_attention` (`sequence_index`: the global position of each laid-out token), and
`ops.attention.attention` runs `context_attention`: `ops.per_shard` with the ``"sequence"`` role, and
on each device ring or all-gather attention. Which one is a documented rule, `context_impl_for`:
the attention impls ``chunked`` and ``auto`` run as a ring (`ring_attention`: its per-step kernel is
the blockwise one, the only kernel that returns the log-sum-exp the ring merges by; K/V memory
O(T / n)); every other impl (``xla``, ``cudnn``, ``splash``, ``pallas_gpu``) runs as itself on the
local queries against K/V gathered over ``context`` (`all_gather_attention`: K/V memory O(T)).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from transformer_jax.core.mesh_axes import CONTEXT
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.per_shard import per_shard
from transformer_jax.ops.ring_attention import Attend, all_gather_attention, ring_attention, zigzag_perm

CONTEXT_IMPLS = ("ring", "all_gather")
RING_IMPLS = ("chunked", "auto")  # attention impls that run as a ring (the rest gather K/V)
_MASK_ARRAYS = ("q_positions", "kv_positions", "q_segment_ids", "kv_segment_ids", "kv_valid")


def context_size() -> int:
    """Devices on the ``context`` axis of the surrounding mesh (1: none, or inside a ``shard_map``)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or CONTEXT not in mesh.axis_names or mesh.manual_axes:
        return 1
    return int(mesh.shape[CONTEXT])


def sequence_index(T: int) -> np.ndarray | None:
    """Global position [T] of each token of a laid-out sequence under the surrounding mesh (the
    zigzag layout of its ``context`` axis), or None when the sequence is not split (natural order)."""
    n = context_size()
    return None if n == 1 else zigzag_perm(T, n).astype(np.int32)


def context_impl_for(impl: str) -> str:
    """``ring`` for the attention impls in RING_IMPLS, else ``all_gather`` (see the module docstring)."""
    return "ring" if impl in RING_IMPLS else "all_gather"


def context_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B T K D"],
    v_BSKD: Float[Array, "B T K D"],
    *,
    mask: AttentionMask | None,
    context_impl: str,
    attend: Attend,
    scale: float | None = None,
    softcap: float | None = None,
    block_size: int = 512,
) -> Float[Array, "B T H D"]:
    """Self-attention of a sequence laid out zigzag over the mesh's ``context`` axis: per device,
    `ring_attention` (``context_impl="ring"``) or `all_gather_attention` with ``attend`` (the
    kernel run on the local queries against the gathered keys: ``attend(q, k, v, *, mask)``)."""
    if context_impl not in CONTEXT_IMPLS:
        raise ValueError(f"context_impl={context_impl!r}; expected one of {CONTEXT_IMPLS}")
    n = context_size()
    B, T = q_BTHD.shape[:2]
    if T % (2 * n):
        raise ValueError(
            f"a sequence of {T} tokens cannot be laid out zigzag over context={n} devices: "
            f"use a length divisible by {2 * n} (2 x mesh.context)"
        )
    mask = AttentionMask() if mask is None else mask
    if mask.dense is not None:
        raise ValueError(
            "context parallelism takes no dense mask; use causal, window, positions, segment ids, kv_valid"
        )
    q_seg, kv_seg = mask._segments(T, T)
    mask = dataclasses.replace(mask, q_segment_ids=q_seg, kv_segment_ids=kv_seg)
    names = [f for f in _MASK_ARRAYS if getattr(mask, f) is not None]
    arrays = [jnp.broadcast_to(jnp.atleast_2d(getattr(mask, f)), (B, T)) for f in names]

    def kernel(q, k, v, *arrs):
        local = dataclasses.replace(mask, **dict(zip(names, arrs)))
        if context_impl == "ring":
            return ring_attention(
                q, k, v, axis_name=CONTEXT, mask=local, scale=scale, softcap=softcap, block_size=block_size
            )
        return all_gather_attention(q, k, v, axis_name=CONTEXT, mask=local, attend=attend)

    qkv = ("batch", "sequence", "heads", None)
    dims = [qkv, qkv, qkv] + [("batch", "sequence")] * len(arrays)
    return per_shard(kernel, [q_BTHD, k_BSKD, v_BSKD, *arrays], dims, qkv)
