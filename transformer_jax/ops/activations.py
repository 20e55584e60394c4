"""Activations and the position-wise feed-forward network (plain and gated).

``FFN_ACTIVATIONS`` maps a config name to ``FfnSpec(activation, gated)``. Gated variants
(Shazeer 2020, "GLU Variants Improve Transformer") need a third weight ``w_gate``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from transformer_jax.core.registry import Registry


def relu(x: Array) -> Array:
    """``max(0, x)``."""
    return jnp.maximum(x, 0)


def gelu(x: Array) -> Array:
    """Exact GELU (Hendrycks & Gimpel 2016): ``0.5 x (1 + erf(x / sqrt(2)))``."""
    return 0.5 * x * (1.0 + jax.lax.erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x: Array) -> Array:
    """Tanh GELU (GPT-2 ``gelu_new``): ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relu2(x: Array) -> Array:
    """Squared ReLU (So et al. 2021, Primer): ``max(0, x)^2``."""
    return jnp.square(jnp.maximum(x, 0))


def silu(x: Array) -> Array:
    """SiLU / Swish-1: ``x * sigmoid(x)``."""
    return x * jax.nn.sigmoid(x)


@dataclasses.dataclass(frozen=True)
class FfnSpec:
    """``activation`` applied to ``x @ w_in`` (plain) or to ``x @ w_gate`` (gated)."""

    activation: Callable[[Array], Array]
    gated: bool


FFN_ACTIVATIONS: Registry[FfnSpec] = Registry("ffn activation")
FFN_ACTIVATIONS.register("relu", FfnSpec(relu, gated=False))
FFN_ACTIVATIONS.register("gelu", FfnSpec(gelu, gated=False))
FFN_ACTIVATIONS.register("gelu_tanh", FfnSpec(gelu_tanh, gated=False))
FFN_ACTIVATIONS.register("swiglu", FfnSpec(silu, gated=True))
FFN_ACTIVATIONS.register("relu2", FfnSpec(relu2, gated=False))
FFN_ACTIVATIONS.register("geglu", FfnSpec(gelu, gated=True))
FFN_ACTIVATIONS.register("geglu_tanh", FfnSpec(gelu_tanh, gated=True))  # Gemma's gelu_pytorch_tanh


def ffn(
    x: Float[Array, "... D"],
    w_in: Float[Array, "D F"],
    w_out: Float[Array, "F D"],
    *,
    activation: str | FfnSpec,
    w_gate: Float[Array, "D F"] | None = None,
    b_in: Float[Array, " F"] | None = None,
    b_out: Float[Array, " D"] | None = None,
) -> Float[Array, "... D"]:
    """Position-wise FFN. Plain (Vaswani et al. 2017): ``act(x W_in + b_in) W_out + b_out``.

    Gated (Shazeer 2020): ``(act(x W_gate) * (x W_in + b_in)) W_out + b_out``, e.g. SwiGLU with
    act = SiLU (LLaMA's ``down(silu(gate(x)) * up(x))``: ``w_gate`` = gate, ``w_in`` = up).
    ``activation`` is a name in ``FFN_ACTIVATIONS`` or an ``FfnSpec``.
    """
    spec = FFN_ACTIVATIONS.get(activation) if isinstance(activation, str) else activation
    if spec.gated and w_gate is None:
        raise ValueError(f"activation={activation!r} is gated and needs w_gate [D, F]")
    if not spec.gated and w_gate is not None:
        raise ValueError(f"activation={activation!r} is not gated; pass w_gate=None")
    h = x @ w_in
    if b_in is not None:
        h = h + b_in
    if spec.gated:
        assert w_gate is not None  # checked above
        h = spec.activation(x @ w_gate) * h
    else:
        h = spec.activation(h)
    y = h @ w_out
    if b_out is not None:
        y = y + b_out
    return y
