"""Token embedding, optionally scaled by sqrt(d_model) and tied to the output projection."""

from __future__ import annotations

import dataclasses
import math
import typing

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.core.configlib import Config, setting

Initializer = jax.nn.initializers.Initializer


@dataclasses.dataclass(frozen=True)
class EmbeddingsConfig(Config):
    """The token embeddings (``model.embeddings``): ``tie``: the output projection is the table
    transposed (`Embed.attend`); ``scale``: lookups times sqrt(d_model) (Vaswani et al. 2017; the
    table then starts at std 1/sqrt(d_model)); ``share``: an encoder-decoder's source and target
    tokens share one table (read by ``encoder_decoder`` only); ``final_softcap``: cap * tanh(x / cap)
    on the output logits (Gemma 2; None: off)."""

    PATH: typing.ClassVar[str] = "model.embeddings"
    tie: bool = True
    scale: bool = False
    share: bool = True
    final_softcap: float | None = setting(None, gt=0)


class Embed(nnx.Module):
    """Embedding table [V, D] (logical axes ``vocab``, ``embed``).

    ``__call__(ids_BT) -> x_BTD`` looks tokens up (times sqrt(D) when ``scale``, Vaswani et al.
    2017, section 3.4); ``attend(x_BTD) -> logits_BTV`` = x E^T, the tied output projection.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        *,
        init: Initializer,
        scale: bool = False,
        dtype: jnp.dtype = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        self.embedding = nnx.Param(
            init(rngs.params(), (vocab_size, d_model), param_dtype), logical_axes=("vocab", "embed")
        )
        self.multiplier = math.sqrt(d_model) if scale else 1.0
        self.dtype = dtype

    def __call__(self, ids_BT: Int[Array, "B T"]) -> Float[Array, "B T D"]:
        x_BTD = jnp.take(self.embedding[...], ids_BT, axis=0).astype(self.dtype)
        return x_BTD * self.multiplier if self.multiplier != 1.0 else x_BTD

    def attend(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        return jnp.einsum("btd,vd->btv", x_BTD.astype(self.dtype), self.embedding[...].astype(self.dtype))
