"""Inverted dropout (Srivastava et al. 2014) as a pure function of an explicit PRNG key."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array


def dropout(x: Array, rate: float, key: jax.Array | None) -> Array:
    """Zero each element with probability ``rate`` and scale survivors by ``1 / (1 - rate)``.

    Identity when ``rate == 0`` or ``key is None`` (deterministic / eval mode). ``rate`` is a
    Python float in ``[0, 1)``; the result keeps ``x``'s shape and dtype and its expectation.
    """
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"rate={rate} must be in [0, 1) (0 disables dropout)")
    if rate == 0.0 or key is None:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), x.dtype)).astype(x.dtype)
