"""Grouped matmul of MoE experts by the TPU Pallas megablox kernel (Gale et al. 2023, MegaBlocks).

`megablox_ragged_dot(x_RD, w_EDF, sizes_E)` is a drop-in for `jax.lax.ragged_dot` (the grouped
matmul of `moe_dispatch.ragged_dispatch`): rows [sum(sizes[:e]), sum(sizes[:e + 1])) of x are
multiplied by w[e]; rows past sum(sizes) give 0. Differentiable (megablox's gmm / tgmm VJP).
`interpret=True` runs the kernel in the Pallas interpreter (e.g. on CPU).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int


def megablox_ragged_dot(
    x_RD: Float[Array, "R D"],
    w_EDF: Float[Array, "E D F"],
    sizes_E: Int[Array, " E"],
    *,
    block_rows: int = 128,
    interpret: bool = False,
) -> Float[Array, "R F"]:
    """sum_e 1[row in group e] * x @ w[e], with jax.experimental.pallas.ops.tpu.megablox.gmm.

    Tiles: rows in blocks of block_rows (R padded up to a multiple of it, a multiple of 8),
    D and F in blocks of min(dim, 128). Output dtype is x's."""
    from jax.experimental.pallas.ops.tpu.megablox import ops as megablox

    R, D = x_RD.shape
    F = w_EDF.shape[-1]
    if block_rows < 8 or block_rows % 8:
        raise ValueError(f"block_rows={block_rows} must be a positive multiple of 8")
    tm = min(block_rows, -(-R // 8) * 8)
    Rp = -(-R // tm) * tm
    in_group_Rp = jnp.arange(Rp) < jnp.sum(sizes_E)
    x = jnp.where(in_group_Rp[:, None], jnp.pad(x_RD, ((0, Rp - R), (0, 0))), 0)  # rows in no group: 0, grad 0
    out = megablox.gmm(
        x,
        w_EDF.astype(x_RD.dtype),
        jnp.asarray(sizes_E, jnp.int32),
        x_RD.dtype,
        (tm, min(D, 128), min(F, 128)),
        interpret=interpret,
    )
    return jnp.where(in_group_Rp[:, None], out, 0)[:R].astype(x_RD.dtype)
