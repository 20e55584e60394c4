"""Dense projections with logical axis names, written as einsums so heads stay a real axis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.nn import initializers
from jaxtyping import Array, Float

from transformer_jax.ops import linear as linear_ops

Initializer = jax.nn.initializers.Initializer


class DenseGeneral(nnx.Module):
    """``y = einsum(x, W) + b`` contracting the trailing ``len(in_shape)`` axes of x.

    Kernel shape ``in_shape + out_shape`` (e.g. [D, H, Dh] for a query projection), carrying the
    logical axis names ``axes`` (metadata ``logical_axes``, read by ``transformer_jax.parallel``).
    Parameters are stored in ``param_dtype``; the product runs in ``dtype``. ``lora`` is None or
    an adapter module attached later (``models.lora.apply_lora``): ``y += lora(x)``.

    Kernel metadata read by ``models.model_roles`` (besides ``logical_axes``): ``projection``
    (e.g. ``"q"``, ``"up"``; LoRA targets it by that name) and ``role`` (e.g. ``"router"``, where the
    axes alone do not say it); the bias has role ``bias``.
    """

    def __init__(
        self,
        in_shape: int | tuple[int, ...],
        out_shape: int | tuple[int, ...],
        *,
        axes: tuple[str | None, ...],
        use_bias: bool = False,
        projection: str | None = None,
        role: str | None = None,
        kernel_init: Initializer = initializers.lecun_normal(),
        dtype: jnp.dtype = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        self.in_shape = (in_shape,) if isinstance(in_shape, int) else tuple(in_shape)
        self.out_shape = (out_shape,) if isinstance(out_shape, int) else tuple(out_shape)
        if len(axes) != len(self.in_shape) + len(self.out_shape):
            raise ValueError(f"axes={axes} must name every kernel axis of {self.in_shape + self.out_shape}")
        self.dtype = dtype
        named: dict[str, Any] = {k: v for k, v in (("projection", projection), ("role", role)) if v is not None}
        self.kernel = nnx.Param(
            kernel_init(rngs.params(), self.in_shape + self.out_shape, param_dtype), logical_axes=axes, **named
        )
        self.bias = (
            nnx.Param(jnp.zeros(self.out_shape, param_dtype), logical_axes=axes[len(self.in_shape) :], role="bias")
            if use_bias
            else None
        )
        self.lora: Callable[[Array], Array] | None = None

    def __call__(self, x: Float[Array, "... In"]) -> Float[Array, "... Out"]:
        n_in = len(self.in_shape)
        kernel = self.kernel[...].astype(self.dtype)
        y = linear_ops.dense(x.astype(self.dtype), kernel, n_in)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        if self.lora is not None:
            y = y + self.lora(x.astype(self.dtype))
        return y
