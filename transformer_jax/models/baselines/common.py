"""Pieces shared by the neural baselines: token embedding and the output layer."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jax.nn import initializers
from jaxtyping import Array, Float

from transformer_jax.nn.embed import Embed
from transformer_jax.nn.linear import DenseGeneral


def make_embed(cfg, rngs: nnx.Rngs) -> Embed:
    """Embedding table [V, d_model] drawn from N(0, init.std^2)."""
    return Embed(
        cfg.dims.vocab_size,
        cfg.dims.d_model,
        init=initializers.normal(cfg.init.std),
        dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype,
        rngs=rngs,
    )


class OutputLayer(nnx.Module):
    """``logits = x U + b`` (float32), with ``U`` tied to the embedding (``U = E^T``) when
    ``tie`` (else LeCun-normal); the bias is always trained (Bengio et al. 2003, eq. 1)."""

    def __init__(self, cfg, d_in: int, embed: Embed, *, tie: bool, rngs: nnx.Rngs):
        self.embed = embed if tie else None
        self.proj = (
            None
            if tie
            else DenseGeneral(
                d_in,
                cfg.dims.vocab_size,
                axes=("mlp", "vocab"),
                kernel_init=initializers.lecun_normal(),
                dtype=cfg.compute_dtype,
                param_dtype=cfg.params_dtype,
                rngs=rngs,
            )
        )
        self.bias = nnx.Param(jnp.zeros((cfg.dims.vocab_size,), cfg.params_dtype), logical_axes=("vocab",), role="bias")

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... V"]:
        if self.proj is None:
            assert self.embed is not None  # tied: embed is set exactly when proj is not
            logits = self.embed.attend(x)
        else:
            logits = self.proj(x)
        return logits.astype(jnp.float32) + self.bias[...].astype(jnp.float32)
