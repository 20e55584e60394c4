"""Logit soft-capping (Gemma 2, Team Gemma 2024; modded-nanogpt): ``cap * tanh(x / cap)``.

Bounds logits to (-cap, cap) smoothly; ``cap=None`` is the identity. Used on attention logits
(after the 1/sqrt(d) scale, before bias and mask) and on output logits.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float


def check_cap(cap: float | None) -> None:
    """Raises unless ``cap`` is None or positive."""
    if cap is not None and not cap > 0:
        raise ValueError(f"softcap cap={cap} must be positive (or None for no capping)")


def softcap(x: Float[Array, "..."], cap: float | None) -> Float[Array, "..."]:
    """``cap * tanh(x / cap)``, or ``x`` when ``cap`` is None."""
    check_cap(cap)
    if cap is None:
        return x
    return cap * jnp.tanh(x / cap)


def softcap_grad(capped: Float[Array, "..."], cap: float | None) -> Float[Array, "..."]:
    """d softcap(x) / dx written with the capped value y: ``1 - (y / cap)^2``."""
    if cap is None:
        return jnp.ones_like(capped)
    return 1.0 - jnp.square(capped / cap)
