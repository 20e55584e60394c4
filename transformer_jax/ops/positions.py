"""Position encodings that are not rotations: sinusoidal, T5 relative bias, ALiBi.

RoPE lives in :mod:`transformer_jax.ops.rope`. Everything here is pure ``jax.numpy``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int


def sinusoidal_embedding(
    positions: ArrayLike, d_model: int, *, max_timescale: float = 10000.0
) -> Float[Array, "*batch d_model"]:
    """Sinusoidal encoding of Vaswani et al. 2017 (section 3.5), interleaved as in the paper.

    ``PE[..., 2i] = sin(pos / max_timescale^(2i/d_model))`` and
    ``PE[..., 2i+1] = cos(pos / max_timescale^(2i/d_model))``.
    ``positions`` is any int or float array (e.g. ``[B, T]``); the result is float32 with shape
    ``positions.shape + (d_model,)``.
    """
    if d_model <= 0 or d_model % 2:
        raise ValueError(
            f"d_model={d_model} must be a positive even number for the sinusoidal encoding "
            "(sin and cos channels come in pairs)"
        )
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    inv_timescale = jnp.asarray(max_timescale ** (-two_i / d_model), jnp.float32)
    angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_timescale
    pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
    return pe.reshape(*angles.shape[:-1], d_model)


def relative_position_buckets(
    relative_position: ArrayLike,
    *,
    bidirectional: bool,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Int[Array, "*shape"]:
    """T5's log-spaced buckets (Raffel et al. 2020; HF ``_relative_position_bucket``).

    ``relative_position = kv_pos - q_pos``. Bidirectional: half of the buckets for keys after the
    query. Within a half, the first ``num_buckets // 2`` buckets are exact distances and the rest
    grow logarithmically up to ``max_distance``; farther distances share the last bucket.
    Unidirectional: keys after the query (positive offsets) all fall in bucket 0. Computed in
    float32 like the original, result int32 in ``[0, num_buckets)``.
    """
    if num_buckets < 2 or (bidirectional and num_buckets < 4):
        raise ValueError(f"num_buckets={num_buckets} is too small; use at least 4 (bidirectional) or 2")
    rel = jnp.asarray(relative_position, jnp.int32)
    buckets = jnp.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).astype(jnp.int32) * num_buckets
        n = jnp.abs(rel)
    else:
        n = -jnp.minimum(rel, 0)
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance={max_distance} must exceed the exact range {max_exact} "
            f"(num_buckets={num_buckets * (2 if bidirectional else 1)})"
        )
    is_small = n < max_exact
    safe_n = jnp.maximum(n, max_exact).astype(jnp.float32)  # log(0) never evaluated
    log_ratio = jnp.log(safe_n / max_exact) / math.log(max_distance / max_exact)
    if_large = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
    if_large = jnp.minimum(if_large, num_buckets - 1)
    return buckets + jnp.where(is_small, n, if_large)


def relative_position_bias(
    table_NH: Float[Array, "N H"],
    q_positions_BT: Int[Array, "B T"],
    kv_positions_BS: Int[Array, "B S"],
    *,
    bidirectional: bool,
    num_buckets: int,
    max_distance: int,
) -> Float[Array, "B H T S"]:
    """T5 relative attention bias: ``bias[b, h, t, s] = table[bucket(kv[b, s] - q[b, t]), h]``.

    ``table_NH`` is the learned ``[num_buckets, H]`` table (T5 layout).
    """
    if table_NH.shape[0] != num_buckets:
        raise ValueError(
            f"table_NH has {table_NH.shape[0]} rows but num_buckets={num_buckets}; "
            "the table must be [num_buckets, n_heads]"
        )
    q = jnp.asarray(q_positions_BT)
    kv = jnp.asarray(kv_positions_BS)
    rel_BTS = kv[..., None, :] - q[..., :, None]
    buckets_BTS = relative_position_buckets(
        rel_BTS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    bias_BTSH = jnp.take(table_NH, buckets_BTS, axis=0)
    return jnp.moveaxis(bias_BTSH, -1, -3)


def _alibi_slopes_list(n: int) -> list[float]:
    if n & (n - 1) == 0:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return _alibi_slopes_list(closest) + _alibi_slopes_list(2 * closest)[0::2][: n - closest]


def alibi_slopes(n_heads: int) -> Float[Array, " H"]:
    """ALiBi head slopes (Press et al. 2022): geometric ``2^(-8/n) ... 2^(-8)`` for a power of 2.

    For other ``n_heads``, the slopes of the closest smaller power of two ``c``, then every other
    slope of ``2c`` heads until ``n_heads`` are filled (the paper's rule).
    """
    if n_heads < 1:
        raise ValueError(f"n_heads={n_heads} must be >= 1 for ALiBi slopes")
    return jnp.asarray(_alibi_slopes_list(n_heads), jnp.float32)


def alibi_bias(
    slopes_H: Float[Array, " H"],
    q_positions_BT: Int[Array, "B T"],
    kv_positions_BS: Int[Array, "B S"],
    *,
    causal: bool = True,
) -> Float[Array, "B H T S"]:
    """ALiBi bias ``-slope[h] * (q_pos - kv_pos)`` (causal) or ``-slope[h] * |q_pos - kv_pos|``.

    In the causal form, entries with ``kv_pos > q_pos`` are positive and must be masked by the
    caller's causal mask.
    """
    q = jnp.asarray(q_positions_BT, jnp.float32)
    kv = jnp.asarray(kv_positions_BS, jnp.float32)
    dist_BTS = q[..., :, None] - kv[..., None, :]
    if not causal:
        dist_BTS = jnp.abs(dist_BTS)
    slopes = jnp.asarray(slopes_H, jnp.float32)
    return -slopes[:, None, None] * dist_BTS[..., None, :, :]
