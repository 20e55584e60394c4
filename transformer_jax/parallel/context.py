"""Batches for context parallelism: each [B, T] row laid out in the zigzag order of the ``context``
mesh axis before it is placed (the sequence split over ``context`` by `parallel.batch_sharding`).

The layout is chosen where the batch is laid out: every per-token array (inputs, targets, weights,
segment ids and positions) is permuted the same way, so RoPE and learned positions read each token's
global position from ``positions`` and the per-token loss is unchanged (a sum over tokens).
Attention's causal mask and sliding window read the global position of each laid-out token from the
layout itself (`ops.context_parallel.sequence_index`).
"""

from __future__ import annotations

import numpy as np

from transformer_jax.core.configlib import fail
from transformer_jax.core.mesh_axes import CONTEXT
from transformer_jax.ops.ring_attention import zigzag_perm


def context_devices(mesh) -> int:
    return int(dict(mesh.shape).get(CONTEXT, 1))


def check_context(model_kind: str, seq_len: int, n: int) -> None:
    """A model and length that n context devices can split: a decoder-only LM (self-attention
    over one sequence) and a length the zigzag layout can take (2n chunks)."""
    if n == 1:
        return
    if model_kind != "decoder_lm":
        fail(
            "mesh.context",
            n,
            f"splits the sequence of a decoder_lm only; model.kind={model_kind!r} has cross-attention",
            "set mesh.context=1",
        )
    if seq_len % (2 * n):
        fail(
            "data.seq_len",
            seq_len,
            f"is not divisible by 2 x mesh.context ({2 * n}): the zigzag layout cuts it into 2 chunks per device",
            f"use a multiple of {2 * n}, or mesh.context=1",
        )


def lay_out(batch: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """``batch`` with every [B, T] array in the zigzag order of n context devices (n = 1: as is);
    [B] arrays (e.g. source ids) unchanged."""
    if n == 1:
        return batch
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        out[k] = v[:, zigzag_perm(v.shape[1], n)] if v.ndim >= 2 else v
    return out
