"""Grouped matmul of MoE experts by the TPU Pallas megablox kernel (Gale et al. 2023, MegaBlocks).

`megablox_ragged_dot(x_RD, w_EDF, sizes_E)` is a drop-in for `jax.lax.ragged_dot` (the grouped
matmul of `moe_dispatch.ragged_dispatch`): rows [sum(sizes[:e]), sum(sizes[:e + 1])) of x are
multiplied by w[e]; rows past sum(sizes) give 0. Differentiable (megablox's gmm / tgmm VJP).
`interpret=True` runs the kernel in the Pallas interpreter (e.g. on CPU).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

LANES = 128  # Mosaic's lane width: a block's last dimension is a multiple of it (or the whole array's)


def megablox_ragged_dot(
    x_RD: Float[Array, "R D"],
    w_EDF: Float[Array, "E D F"],
    sizes_E: Int[Array, " E"],
    *,
    block_rows: int = 128,
    interpret: bool = False,
) -> Float[Array, "R F"]:
    """sum_e 1[row in group e] * x @ w[e], with jax.experimental.pallas.ops.tpu.megablox.gmm.

    Tiles: rows in blocks of block_rows (R padded up to a multiple of it, a multiple of 8); D and F
    in blocks of 128, each padded with zeros up to a multiple of 128 (the kernel's backward pass
    tiles F with D's tile and D with F's, and Mosaic takes only lane-aligned blocks). Output dtype
    is x's."""
    from jax.experimental.pallas.ops.tpu.megablox import ops as megablox

    R, D = x_RD.shape
    F = w_EDF.shape[-1]
    if block_rows < 8 or block_rows % 8:
        raise ValueError(f"block_rows={block_rows} must be a positive multiple of 8")
    tm = min(block_rows, -(-R // 8) * 8)
    Rp = -(-R // tm) * tm
    Dp, Fp = -(-D // LANES) * LANES, -(-F // LANES) * LANES
    in_group_Rp = jnp.arange(Rp) < jnp.sum(sizes_E)
    x = jnp.where(in_group_Rp[:, None], jnp.pad(x_RD, ((0, Rp - R), (0, Dp - D))), 0)  # rows in no group: 0, grad 0
    w = jnp.pad(w_EDF.astype(x_RD.dtype), ((0, 0), (0, Dp - D), (0, Fp - F)))
    out = megablox.gmm(x, w, jnp.asarray(sizes_E, jnp.int32), x_RD.dtype, (tm, LANES, LANES), interpret=interpret)
    return jnp.where(in_group_Rp[:, None], out, 0)[:R, :F].astype(x_RD.dtype)
