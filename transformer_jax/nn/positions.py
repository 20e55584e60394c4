"""Position encodings chosen by name: where each one enters the network.

An encoding can add to the token embeddings (``sinusoidal``, ``learned``), rotate queries and
keys inside attention (``rope``: exposes a ``RopeSpec``), or add a bias to the attention logits
(``relative_bias``, ``alibi``). ``none`` does nothing (the model is then permutation-equivariant).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import nnx
from jax.nn import initializers
from jaxtyping import Array, Float, Int

from transformer_jax.core.registry import Registry
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.nn.position_config import PositionConfig, RelativeBiasPositions, RopePositions
from transformer_jax.ops import positions as pos_ops


@dataclasses.dataclass(frozen=True)
class PositionDims:
    """What an encoding takes from the model beyond its own settings (`PositionConfig`)."""

    d_model: int
    n_heads: int
    max_len: int
    bidirectional: bool = False
    init_std: float = 0.02
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32


class PositionEncoding(nnx.Module):
    """Base: no position information anywhere."""

    rope: RopeSpec | None = None

    def __init__(self, cfg: PositionConfig, dims: PositionDims, *, rngs: nnx.Rngs):
        del rngs
        self.cfg = cfg
        self.dims = dims

    def embed(self, x_BTD: Float[Array, "B T D"], positions_BT: Int[Array, "B T"]) -> Float[Array, "B T D"]:
        return x_BTD

    def attention_bias(self, q_positions_BT, kv_positions_BS) -> Float[Array, "B H T S"] | None:
        return None


POSITIONS: Registry[type[PositionEncoding]] = Registry("position encoding")
POSITIONS.register("none", PositionEncoding)


@POSITIONS.register("sinusoidal")
class Sinusoidal(PositionEncoding):
    """x + PE(pos) with the fixed sin/cos table of Vaswani et al. 2017, section 3.5."""

    def embed(self, x_BTD, positions_BT):
        return x_BTD + pos_ops.sinusoidal_embedding(positions_BT, self.dims.d_model).astype(x_BTD.dtype)


@POSITIONS.register("learned")
class Learned(PositionEncoding):
    """x + P[pos] with a learned table P [max_len, D] (GPT-2's ``wpe``)."""

    def __init__(self, cfg: PositionConfig, dims: PositionDims, *, rngs: nnx.Rngs):
        super().__init__(cfg, dims, rngs=rngs)
        init = initializers.normal(stddev=dims.init_std)
        self.table = nnx.Param(
            init(rngs.params(), (dims.max_len, dims.d_model), dims.param_dtype), logical_axes=("max_len", "embed")
        )

    def embed(self, x_BTD, positions_BT):
        return x_BTD + jnp.take(self.table[...], positions_BT, axis=0).astype(x_BTD.dtype)


@POSITIONS.register("rope")
class Rope(PositionEncoding):
    """Rotary embeddings (Su et al. 2021) applied to q and k in every self-attention layer."""

    def __init__(self, cfg: PositionConfig, dims: PositionDims, *, rngs: nnx.Rngs):
        super().__init__(cfg, dims, rngs=rngs)
        assert isinstance(cfg, RopePositions)
        self.rope = cfg.spec()


@POSITIONS.register("relative_bias")
class RelativeBias(PositionEncoding):
    """b_ij = table[bucket(j - i), h], T5's log-bucketed learned bias (Raffel et al. 2020),
    shared by all layers of a stack."""

    def __init__(self, cfg: PositionConfig, dims: PositionDims, *, rngs: nnx.Rngs):
        super().__init__(cfg, dims, rngs=rngs)
        assert isinstance(cfg, RelativeBiasPositions)
        self.table = nnx.Param(
            initializers.normal(stddev=dims.init_std)(rngs.params(), (cfg.buckets, dims.n_heads), dims.param_dtype),
            logical_axes=("buckets", "heads"),
        )

    def attention_bias(self, q_positions_BT, kv_positions_BS):
        cfg = self.cfg
        assert isinstance(cfg, RelativeBiasPositions)
        bias = pos_ops.relative_position_bias(
            self.table[...],
            q_positions_BT,
            kv_positions_BS,
            bidirectional=self.dims.bidirectional,
            num_buckets=cfg.buckets,
            max_distance=cfg.max_distance,
        )
        return bias.astype(self.dims.dtype)


@POSITIONS.register("alibi")
class Alibi(PositionEncoding):
    """ALiBi (Press et al. 2022): b_ij = -m_h * (i - j) with fixed per-head slopes m_h."""

    def attention_bias(self, q_positions_BT, kv_positions_BS):
        slopes_H = pos_ops.alibi_slopes(self.dims.n_heads)
        bias = pos_ops.alibi_bias(slopes_H, q_positions_BT, kv_positions_BS, causal=not self.dims.bidirectional)
        return bias.astype(self.dims.dtype)


def build_positions(cfg: PositionConfig, dims: PositionDims, *, rngs: nnx.Rngs) -> PositionEncoding:
    """The encoding module ``cfg`` chooses."""
    return POSITIONS.get(cfg.kind)(cfg, dims, rngs=rngs)
