"""Normalisation over the last axis: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019).

Both compute in float32 and return the input's dtype. ``NORMS`` maps a config name to a
``NormSpec`` so a module knows which parameters (scale, optional bias) to create.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array, Float

from transformer_jax.core.registry import Registry


def layer_norm(
    x: Float[Array, "... D"],
    scale: Float[Array, " D"] | None = None,
    bias: Float[Array, " D"] | None = None,
    *,
    eps: float = 1e-5,
) -> Float[Array, "... D"]:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis (biased variance)."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    centered = x32 - mean
    var = jnp.mean(jnp.square(centered), axis=-1, keepdims=True)
    y = centered * jnp.reciprocal(jnp.sqrt(var + eps))
    if scale is not None:
        y = y * scale.astype(jnp.float32)
    if bias is not None:
        y = y + bias.astype(jnp.float32)
    return y.astype(x.dtype)


def rms_norm(
    x: Float[Array, "... D"],
    scale: Float[Array, " D"] | None = None,
    *,
    eps: float = 1e-6,
) -> Float[Array, "... D"]:
    """``x / sqrt(mean(x^2) + eps) * scale`` over the last axis (no centring, no bias)."""
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = x32 * jnp.reciprocal(jnp.sqrt(ms + eps))
    if scale is not None:
        y = y * scale.astype(jnp.float32)
    return y.astype(x.dtype)


def rms_norm_plus_one(
    x: Float[Array, "... D"],
    scale: Float[Array, " D"] | None = None,
    *,
    eps: float = 1e-6,
) -> Float[Array, "... D"]:
    """Gemma's RMSNorm, ``x / sqrt(mean(x^2) + eps) * (1 + w)``: the weight w is stored
    zero-centred (it starts at 0, the identity scale)."""
    one = None if scale is None else 1.0 + scale.astype(jnp.float32)
    return rms_norm(x, one, eps=eps)


@dataclasses.dataclass(frozen=True)
class NormSpec:
    """A norm function ``fn(x, scale, [bias], *, eps)``, whether it takes a bias parameter, and the
    value ``scale`` starts at (1, or 0 for a zero-centred weight)."""

    fn: Callable[..., Array]
    has_bias: bool
    scale_init: float = 1.0


NORMS: Registry[NormSpec] = Registry("norm")
NORMS.register("layernorm", NormSpec(layer_norm, has_bias=True))
NORMS.register("rmsnorm", NormSpec(rms_norm, has_bias=False))
NORMS.register("rmsnorm_plus_one", NormSpec(rms_norm_plus_one, has_bias=False, scale_init=0.0))
