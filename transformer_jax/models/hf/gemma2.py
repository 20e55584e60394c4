"""Gemma 2 (``model_type="gemma2"``): LLaMA's tensors plus a norm after each sublayer
(``placement="sandwich"``), RMSNorm with (1 + w) (``norm="rmsnorm_plus_one"``), GeGLU with the
tanh GELU, embeddings scaled by sqrt(d_model), attention scaled by ``query_pre_attn_scalar ** -0.5``,
soft-capped attention and output logits, local (sliding-window) and global layers alternating
(``attention=local_global``). ``hidden_act`` is superseded by ``hidden_activation`` in
Hugging Face's Gemma code, so only the latter is read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import (
    attention_links,
    decoder_fields,
    decoder_hf,
    ends_links,
    layer,
    mlp_links,
    rotary_buffer,
)
from transformer_jax.models.hf.spec import ConfigReader, Family, Link, copy, register
from transformer_jax.nn.attention_config import LocalGlobalAttention
from transformer_jax.nn.norm_config import RMSNormPlusOneConfig


def local_global_every(r: ConfigReader, n_layers: int, default: int) -> int:
    """``model.attention.global_every`` of ``layer_types``: (every-1) sliding layers, then a full one."""
    r.ignore("sliding_window_pattern", "_sliding_window_pattern")
    every = r.d.get("sliding_window_pattern") or r.d.get("_sliding_window_pattern") or default
    types = r.get("layer_types")
    if types is None:
        return int(every)
    if "full_attention" in types:
        every = list(types).index("full_attention") + 1
    expected = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n_layers)]
    if list(types) != expected:
        raise r.unsupported(
            "layer_types", "only (every - 1) sliding layers then one full layer, repeated, maps to local_global"
        )
    return int(every)


def gemma_fields(
    r: ConfigReader, *, every: int, rope_layer: str | None = None, qk_norm: bool = False
) -> dict[str, Any]:
    r.ignore("hidden_act", "sliding_window_size")
    r.expect("attention_bias", (False,), "Gemma has no attention biases")
    r.expect("use_bidirectional_attention", (None, False), "only causal language models")
    kw = decoder_fields(r, act_key="hidden_activation", act="gelu_pytorch_tanh", tied=True, rope_layer=rope_layer)
    return {
        **kw,
        "use_bias": False,
        "placement": "sandwich",
        "norm": RMSNormPlusOneConfig(eps=kw["norm"].eps),
        "embeddings": dataclasses.replace(kw["embeddings"], scale=True, final_softcap=r.get("final_logit_softcapping")),
        "attention": LocalGlobalAttention(
            local_window=int(r.need("sliding_window")),
            global_every=local_global_every(r, kw["n_layers"], every),
            scale=float(r.need("query_pre_attn_scalar")) ** -0.5,
            softcap=r.get("attn_logit_softcapping"),
            qk_norm=qk_norm,
        ),
    }


def _local_global(cfg: ModelConfig) -> LocalGlobalAttention:
    if not isinstance(cfg.attention, LocalGlobalAttention):
        raise ValueError(f"model.attention={cfg.attention.kind!r}: Gemma alternates local and global layers")
    return cfg.attention


def _pre_attn_scalar(cfg: ModelConfig) -> float | int:
    q = (_local_global(cfg).scale or cfg.dims.resolved_head_dim**-0.5) ** -2
    return round(q) if math.isclose(q, round(q), rel_tol=1e-9) else q


def gemma_hf(cfg: ModelConfig) -> dict[str, Any]:
    attention = _local_global(cfg)
    every = attention.global_every
    return {
        **decoder_hf(cfg, act_key="hidden_activation"),
        "attention_bias": False,
        "query_pre_attn_scalar": _pre_attn_scalar(cfg),
        "attn_logit_softcapping": attention.softcap,
        "final_logit_softcapping": cfg.embeddings.final_softcap,
        "sliding_window": attention.local_window,
        "layer_types": [
            "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(cfg.dims.n_layers)
        ],
    }


def gemma_links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    """LLaMA's tensors with four norms per layer (pre and post each sublayer)."""
    links = ends_links(cfg, names)
    norms = (
        ("input_layernorm", "self_attn_norm"),
        ("post_attention_layernorm", "self_attn_post_norm"),
        ("pre_feedforward_layernorm", "ffn_norm"),
        ("post_feedforward_layernorm", "ffn_post_norm"),
    )
    for i in range(cfg.dims.n_layers):
        p = f"model.layers.{i}"
        links += attention_links(cfg, i, f"{p}.self_attn") + mlp_links(cfg, i, f"{p}.mlp")
        links += [copy(f"{p}.{theirs}.weight", f"{layer(i)}.{ours}.scale") for theirs, ours in norms]
    return links


GEMMA2 = register(
    Family(
        name="gemma2",
        architectures=("Gemma2ForCausalLM",),
        to_config=lambda r: gemma_fields(r, every=2),
        to_hf=gemma_hf,
        links=gemma_links,
        derived=rotary_buffer,
    )
)
