"""A Transformer layer: self-attention, optional cross-attention, feed-forward, each wrapped
by the residual/norm placement chosen by name (``post``, ``pre``, ``deepnorm``, ...)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import jax
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.core.sharding import constrain
from transformer_jax.nn.attention import Attention, RopeSpec
from transformer_jax.nn.attention_config import AttentionConfig, SoftmaxAttention
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitScheme
from transformer_jax.nn.mla import MLADims, MultiHeadLatentAttention
from transformer_jax.nn.mlp import FeedForward
from transformer_jax.nn.moe import MoE, MoESpec
from transformer_jax.nn.norm import Norm
from transformer_jax.nn.norm_config import LayerNormConfig, NormConfig
from transformer_jax.ops import residual
from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.masks import AttentionMask

# Logical axes of the residual stream at block boundaries (mesh axes from the active rules).
ACTIVATION_AXES = ("batch", "length", "act_embed")


@dataclasses.dataclass(frozen=True)
class LayerDims:
    """Sizes of one layer: width ``d_model``; ``n_heads`` query and ``n_kv_heads`` key/value heads
    of ``head_dim`` each; FFN width ``d_ff``."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int


@dataclasses.dataclass(frozen=True)
class ResidualSpec:
    """How each sublayer joins the residual stream: ``placement`` (``ops.residual.PLACEMENTS``);
    ``alpha`` scales the stream inside the placement (DeepNorm: Norm(alpha x + F(x))); ``beta`` is
    the init gain of the value/output/FFN projections (DeepNorm's beta)."""

    placement: str = "pre"
    alpha: float = 1.0
    beta: float = 1.0


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Hyperparameters of one layer (models build it from their ``ModelConfig``).

    ``moe``: Mixture-of-Experts in place of the FFN; in a ``Stack``, only in every
    ``moe_every``-th layer (layers i with (i + 1) % moe_every == 0) from layer ``moe_first_dense``
    on, the others keep the FFN.
    ``attention``: this layer's attention settings (a pattern's ``layer(i)``), ``execution``: its
    kernels, block sizes and dtypes, ``norm``: every norm's (and QK-norm's). ``mla``: the sizes of Multi-head
    Latent Attention (``nn.mla.MLADims``, e.g. a ``models.mla_config.MLAConfig``) in place of
    ``Attention`` for self-attention (``dims.n_kv_heads``/``dims.head_dim`` then size cross-attention only).
    """

    dims: LayerDims
    ffn: str = "relu"
    use_bias: bool = True
    norm: NormConfig = LayerNormConfig()
    residual: ResidualSpec = ResidualSpec()
    dropout: float = 0.0
    attention: AttentionConfig = SoftmaxAttention()
    execution: ExecutionConfig = ExecutionConfig()
    rope: RopeSpec | None = None
    cross: bool = False
    init: InitScheme = InitScheme()
    moe: MoESpec | None = None
    moe_every: int = 1
    moe_first_dense: int = 0
    mla: MLADims | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockInputs:
    """Per-forward values shared by every layer of a stack (closed over, not scanned)."""

    mask: AttentionMask | None = None
    positions: Int[Array, "B T"] | None = None
    bias: Float[Array, "B H T S"] | None = None
    memory: Float[Array, "B S D"] | None = None
    cross_mask: AttentionMask | None = None


class Block(nnx.Module):
    """x -> placement(x, SelfAttn) -> [placement(x, CrossAttn)] -> placement(x, FFN).

    A placement with ``sublayer_norm`` (sandwich) adds ``*_post_norm`` modules that normalise each
    sublayer's output before it joins the residual stream.
    """

    def __init__(self, cfg: BlockConfig, *, rngs: nnx.Rngs):
        self.cfg, dims = cfg, cfg.dims
        self.placement = residual.PLACEMENTS.get(cfg.residual.placement)
        dtypes: dict[str, Any] = dict(dtype=cfg.execution.compute_dtype, param_dtype=cfg.execution.params_dtype)
        attn: dict[str, Any] = dict(
            use_bias=cfg.use_bias,
            settings=cfg.attention,
            execution=cfg.execution,
            init=cfg.init,
            value_gain=cfg.residual.beta,
            **dtypes,
            rngs=rngs,
        )
        norm: dict[str, Any] = dict(**cfg.norm.module_kwargs(), param_dtype=dtypes["param_dtype"])
        if cfg.mla is None:
            self.self_attn = Attention(
                dims.d_model, dims.n_heads, dims.n_kv_heads, dims.head_dim, rope=cfg.rope, norm=cfg.norm, **attn
            )
        else:
            if cfg.rope is None:
                raise ValueError("MLA needs a RoPE spec (its decoupled key is rotated)")
            self.self_attn = MultiHeadLatentAttention(dims.d_model, dims.n_heads, cfg.mla, rope=cfg.rope, **attn)
        self.self_attn_norm = Norm(dims.d_model, **norm)
        post = self.placement.sublayer_norm
        self.self_attn_post_norm = Norm(dims.d_model, **norm) if post else None
        if cfg.cross:
            self.cross_attn = Attention(
                dims.d_model, dims.n_heads, dims.n_kv_heads, dims.head_dim, cross=True, norm=cfg.norm, **attn
            )
            self.cross_attn_norm = Norm(dims.d_model, **norm)
            self.cross_attn_post_norm = Norm(dims.d_model, **norm) if post else None
        else:
            self.cross_attn = self.cross_attn_norm = self.cross_attn_post_norm = None
        ffn: dict[str, Any] = dict(use_bias=cfg.use_bias, init=cfg.init, gain=cfg.residual.beta, **dtypes, rngs=rngs)
        if cfg.moe is None:
            self.ffn = FeedForward(dims.d_model, dims.d_ff, kind=cfg.ffn, **ffn)
        else:
            self.ffn = MoE(dims.d_model, cfg.moe, **ffn)
        self.ffn_norm = Norm(dims.d_model, **norm)
        self.ffn_post_norm = Norm(dims.d_model, **norm) if post else None

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        inputs: BlockInputs,
        *,
        cache: dict | None = None,
        dropout_key: jax.Array | None = None,
    ) -> tuple[Float[Array, "B T D"], dict | None, dict]:
        """Returns (x, updated cache (``{"self": KVCache, "cross": KVCache}``) or None, aux);
        aux["moe"] holds the MoE layer's ``{"losses", "metrics"}``. A call with a
        ``dropout_key`` is a training call (it updates MoE balancing biases)."""
        cfg, placement_apply = self.cfg, self.placement.apply

        def apply(x, fn, norm, alpha, post_norm):
            return placement_apply(x, fn if post_norm is None else (lambda h: post_norm(fn(h))), norm, alpha)

        keys = [None] * 3 if dropout_key is None else list(jax.random.split(dropout_key, 3))
        new_cache = {} if cache is not None else None
        aux = {}
        x_BTD = constrain(x_BTD, ACTIVATION_AXES)

        def self_attention(h):
            y, c = self.self_attn(
                h,
                mask=inputs.mask,
                positions_BT=inputs.positions,
                bias=inputs.bias,
                cache=None if cache is None else cache["self"],
            )
            if new_cache is not None:
                new_cache["self"] = c
            return dropout(y, cfg.dropout, keys[0])

        x_BTD = apply(x_BTD, self_attention, self.self_attn_norm, cfg.residual.alpha, self.self_attn_post_norm)
        cross_attn, cross_attn_norm = self.cross_attn, self.cross_attn_norm
        if cross_attn is not None:
            assert cross_attn_norm is not None  # built together with cross_attn

            def cross_attention(h):
                y, c = cross_attn(
                    h, mask=inputs.cross_mask, kv_BSD=inputs.memory, cache=None if cache is None else cache.get("cross")
                )
                if new_cache is not None:
                    new_cache["cross"] = c
                return dropout(y, cfg.dropout, keys[1])

            x_BTD = apply(x_BTD, cross_attention, cross_attn_norm, cfg.residual.alpha, self.cross_attn_post_norm)

        def feed_forward(h):
            if cfg.moe is None:
                return dropout(cast(FeedForward, self.ffn)(h), cfg.dropout, keys[2])
            segments = None if inputs.mask is None else inputs.mask.q_segment_ids
            y, aux["moe"] = cast(MoE, self.ffn)(
                h,
                valid_BT=None if segments is None else segments != 0,
                train=dropout_key is not None,
                dropless=cache is not None,
            )
            return dropout(y, cfg.dropout, keys[2])

        x_BTD = apply(x_BTD, feed_forward, self.ffn_norm, cfg.residual.alpha, self.ffn_post_norm)
        return constrain(x_BTD, ACTIVATION_AXES), new_cache, aux
