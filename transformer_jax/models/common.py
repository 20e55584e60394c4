"""Pieces shared by the model families: token embedding, output head, caches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.models.config import ModelConfig
from transformer_jax.nn.embed import Embed
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.nn.norm import Norm
from transformer_jax.ops import residual
from transformer_jax.ops.kv_cache import init_kv_cache
from transformer_jax.ops.softcap import softcap as softcap_logits


def make_embed(cfg: ModelConfig, rngs: nnx.Rngs) -> Embed:
    init = cfg.init_scheme().embedding(cfg.dims.d_model, scaled=cfg.embeddings.scale)
    return Embed(
        cfg.dims.vocab_size,
        cfg.dims.d_model,
        init=init,
        scale=cfg.embeddings.scale,
        dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype,
        rngs=rngs,
    )


def make_final_norm(cfg: ModelConfig, rngs: nnx.Rngs) -> Norm | None:
    """Pre-LN stacks end with a norm (the stream is never normalised otherwise); Post-LN ones do not."""
    if not residual.PLACEMENTS.get(cfg.placement).final_norm:
        return None
    return Norm(cfg.dims.d_model, **cfg.norm.module_kwargs(), param_dtype=cfg.params_dtype, rngs=rngs)


def make_lm_head(cfg: ModelConfig, rngs: nnx.Rngs) -> DenseGeneral | None:
    if cfg.embeddings.tie:
        return None
    return DenseGeneral(
        cfg.dims.d_model,
        cfg.dims.vocab_size,
        axes=("embed", "vocab"),
        use_bias=False,
        kernel_init=cfg.init_scheme().kernel(0, 1),
        dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype,
        rngs=rngs,
    )


def output_logits(
    x_BTD: Float[Array, "B T D"],
    final_norm: Norm | None,
    lm_head: DenseGeneral | None,
    embed: Embed,
    softcap: float | None = None,
) -> Float[Array, "B T V"]:
    """Final norm (if any), then the untied head or x E^T; logits in float32, soft-capped to
    (-softcap, softcap) by softcap * tanh(logits / softcap) when ``softcap`` is set (Gemma 2)."""
    if final_norm is not None:
        x_BTD = final_norm(x_BTD)
    logits = embed.attend(x_BTD) if lm_head is None else lm_head(x_BTD)
    return softcap_logits(logits.astype(jnp.float32), softcap)


def make_self_caches(cfg: ModelConfig, n_layers: int, batch: int, max_len: int, dtype=None):
    """Empty per-layer self-attention caches: a list, or one stacked pytree for scanned stacks (with
    ``model.mla``, the latent and RoPE key of each token)."""
    dtype = dtype or cfg.compute_dtype
    mla = cfg.mla
    if mla is None:
        one = lambda: {
            "self": init_kv_cache(batch, max_len, cfg.dims.resolved_kv_heads, cfg.dims.resolved_head_dim, dtype)
        }
    else:  # MLA: one key head, the RoPE key; one value head, the latent (nn.mla)
        one = lambda: {
            "self": init_kv_cache(batch, max_len, 1, mla.qk_rope_head_dim, dtype, value_dim=mla.kv_lora_rank)
        }
    if cfg.execution.scan_layers:
        return jax.tree.map(lambda *xs: jnp.stack(xs), *[one() for _ in range(n_layers)])
    return [one() for _ in range(n_layers)]


def cache_index(caches) -> jax.Array:
    """Number of positions already written (the same in every layer)."""
    first = caches[0] if isinstance(caches, list) else jax.tree.map(lambda x: x[0], caches)
    return first["self"].index
