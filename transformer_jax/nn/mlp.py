"""Position-wise feed-forward network, activation chosen by name (relu, gelu, swiglu, ...)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.nn.init import InitScheme
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.ops import activations


class FeedForward(nnx.Module):
    """FFN(x) = act(x W_in + b_in) W_out + b_out (Vaswani et al. 2017, eq. 2 with act=ReLU);
    gated kinds (SwiGLU, GEGLU; Shazeer 2020) use act(x W_gate) * (x W_in).

    Kernels: ``w_in``/``w_gate`` [D, F] (``embed``, ``mlp``), ``w_out`` [F, D] (``mlp``, ``embed``).
    ``gain`` multiplies the init of all three (DeepNorm's beta).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        kind: str = "relu",
        use_bias: bool = True,
        init: InitScheme = InitScheme(),
        gain: float = 1.0,
        dtype: jnp.dtype = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        self.spec = activations.FFN_ACTIVATIONS.get(kind)
        common: dict[str, Any] = dict(use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.w_in = DenseGeneral(
            d_model, d_ff, axes=("embed", "mlp"), projection="up", kernel_init=init.kernel(0, 1, gain=gain), **common
        )
        self.w_gate = (
            DenseGeneral(
                d_model,
                d_ff,
                axes=("embed", "mlp"),
                projection="gate",
                kernel_init=init.kernel(0, 1, gain=gain),
                **common,
            )
            if self.spec.gated
            else None
        )
        self.w_out = DenseGeneral(
            d_ff,
            d_model,
            axes=("mlp", "embed"),
            projection="down",
            kernel_init=init.kernel(0, 1, residual_out=True, gain=gain),
            **common,
        )

    def __call__(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T D"]:
        if self.w_gate is not None:
            h_BTF = self.spec.activation(self.w_gate(x_BTD)) * self.w_in(x_BTD)
        else:
            h_BTF = self.spec.activation(self.w_in(x_BTD))
        return self.w_out(h_BTF)
