"""LLaMA (``model_type="llama"``, Llama 1-3 incl. Llama 3.1's RoPE scaling) and the pieces the
other LLaMA-layout families (Mistral, Qwen2, Mixtral, Gemma) share: the decoder config fields and
the attention / MLP / embedding tensor names ``model.layers.{i}.self_attn.q_proj.weight`` ...
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.rope import rope_hf, rope_parameters, rope_position
from transformer_jax.models.hf.spec import (
    ConfigReader,
    Family,
    Link,
    copy,
    equal_to,
    linear,
    register,
    reshaped,
)
from transformer_jax.nn.attention_config import LogitAttention
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.norm_config import RMSNormConfig

# HF activation of a gated MLP -> our gated FFN kind
GATED_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}
_GATED_NAMES = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_pytorch_tanh"}


def decoder_fields(
    r: ConfigReader,
    *,
    act_key: str = "hidden_act",
    act: str = "silu",
    tied: bool = False,
    rope_layer: str | None = None,
) -> dict:
    """The ModelConfig fields every LLaMA-layout family shares: sizes, RMSNorm, pre-norm, rotate-half
    RoPE (theta and scaling; of layer type ``rope_layer`` when the config has one per type), gated
    MLP. ``attention_dropout`` is training-time regularisation and ``pretraining_tp`` only splits
    matmuls: neither changes the weights or the forward pass, so they are not carried over (a
    loaded model has dropout 0)."""
    r.ignore("attention_dropout", "pretraining_tp")
    d, h = r.need("hidden_size"), r.need("num_attention_heads")
    name = r.get(act_key, act)
    if name not in GATED_ACTS:
        raise r.unsupported(act_key, f"no gated FFN for it (known: {', '.join(GATED_ACTS)})")
    return dict(
        kind="decoder_lm",
        vocab_size=r.need("vocab_size"),
        d_model=d,
        n_heads=h,
        n_kv_heads=r.get("num_key_value_heads", h),
        head_dim=r.get("head_dim", d // h),
        d_ff=r.need("intermediate_size"),
        n_layers=r.need("num_hidden_layers"),
        max_len=r.need("max_position_embeddings"),
        placement="pre",
        norm=RMSNormConfig(eps=float(r.need("rms_norm_eps"))),
        ffn=GATED_ACTS[name],
        embeddings=EmbeddingsConfig(tie=bool(r.get("tie_word_embeddings", tied))),
        position=rope_position(r, rope_parameters(r, rope_layer), pairing="split"),
    )


def decoder_hf(cfg: ModelConfig, *, act_key: str = "hidden_act") -> dict[str, Any]:
    """config.json entries of `decoder_fields` (the inverse mapping)."""
    if cfg.ffn not in _GATED_NAMES:
        raise ValueError(f"model.ffn={cfg.ffn!r} has no Hugging Face LLaMA-layout equivalent (gated FFNs only)")
    return {
        "vocab_size": cfg.dims.vocab_size,
        "hidden_size": cfg.dims.d_model,
        "num_attention_heads": cfg.dims.n_heads,
        "num_key_value_heads": cfg.dims.resolved_kv_heads,
        "head_dim": cfg.dims.resolved_head_dim,
        "intermediate_size": cfg.dims.resolved_d_ff,
        "num_hidden_layers": cfg.dims.n_layers,
        "max_position_embeddings": cfg.dims.max_len,
        "rms_norm_eps": cfg.norm.eps,
        act_key: _GATED_NAMES[cfg.ffn],
        "tie_word_embeddings": cfg.embeddings.tie,
        "rope_parameters": rope_hf(cfg),
        "attention_dropout": 0.0,
    }


def layer(i: int) -> str:
    return f"layers.layers.{i}"


def attention_links(cfg: ModelConfig, i: int, hf: str) -> list[Link]:
    """q/k/v/o projections of layer i (``hf``: the HF prefix, e.g. ``model.layers.3.self_attn``),
    their biases when the config has them, and QK-norm scales."""
    D, H, K, Dh = cfg.dims.d_model, cfg.dims.n_heads, cfg.dims.resolved_kv_heads, cfg.dims.resolved_head_dim
    ours = f"{layer(i)}.self_attn"
    links = [
        linear(f"{hf}.q_proj.weight", f"{ours}.q.kernel", (D,), (H, Dh)),
        linear(f"{hf}.k_proj.weight", f"{ours}.k.kernel", (D,), (K, Dh)),
        linear(f"{hf}.v_proj.weight", f"{ours}.v.kernel", (D,), (K, Dh)),
        linear(f"{hf}.o_proj.weight", f"{ours}.o.kernel", (H, Dh), (D,)),
    ]
    if cfg.use_bias if cfg.attention.qkv_bias is None else cfg.attention.qkv_bias:
        links += [
            reshaped(f"{hf}.{p}_proj.bias", f"{ours}.{p}.bias", (n, Dh)) for p, n in (("q", H), ("k", K), ("v", K))
        ]
    if cfg.use_bias:
        links.append(copy(f"{hf}.o_proj.bias", f"{ours}.o.bias"))
    if isinstance(cfg.attention, LogitAttention) and cfg.attention.qk_norm:
        links += [copy(f"{hf}.{p}_norm.weight", f"{ours}.{p}_norm.scale") for p in ("q", "k")]
    return links


def mlp_links(cfg: ModelConfig, i: int, hf: str) -> list[Link]:
    """gate/up/down projections of layer i's gated MLP (``hf``: e.g. ``model.layers.3.mlp``)."""
    D, F = cfg.dims.d_model, cfg.dims.resolved_d_ff
    ours = f"{layer(i)}.ffn"
    names = (("gate_proj", "w_gate", (D,), (F,)), ("up_proj", "w_in", (D,), (F,)), ("down_proj", "w_out", (F,), (D,)))
    links = [linear(f"{hf}.{theirs}.weight", f"{ours}.{w}.kernel", i_, o_) for theirs, w, i_, o_ in names]
    if cfg.use_bias:
        links += [copy(f"{hf}.{theirs}.bias", f"{ours}.{w}.bias") for theirs, w, _, _ in names]
    return links


def ends_links(cfg: ModelConfig, names: AbstractSet[str] | None, prefix: str = "model") -> list[Link]:
    """Token embedding, final norm and output head (a tied head stored anyway is checked equal)."""
    embed = f"{prefix}.embed_tokens.weight"
    links = [copy(embed, "embed.embedding"), copy(f"{prefix}.norm.weight", "final_norm.scale")]
    if not cfg.embeddings.tie:
        links.append(linear("lm_head.weight", "lm_head.kernel", (cfg.dims.d_model,), (cfg.dims.vocab_size,)))
    elif names is not None and "lm_head.weight" in names:
        links.append(equal_to("lm_head.weight", embed, "tie_word_embeddings is true"))
    return links


def block_links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    """A LLaMA-layout checkpoint: pre-norm blocks with a gated MLP."""
    links = ends_links(cfg, names)
    for i in range(cfg.dims.n_layers):
        p = f"model.layers.{i}"
        links += attention_links(cfg, i, f"{p}.self_attn")
        links += mlp_links(cfg, i, f"{p}.mlp")
        links += [
            copy(f"{p}.input_layernorm.weight", f"{layer(i)}.self_attn_norm.scale"),
            copy(f"{p}.post_attention_layernorm.weight", f"{layer(i)}.ffn_norm.scale"),
        ]
    return links


def rotary_buffer(name: str) -> bool:
    """Old checkpoints store RoPE's inverse frequencies, a buffer recomputed from the config."""
    return name.endswith(".rotary_emb.inv_freq")


def _llama_config(r: ConfigReader) -> dict:
    kw = decoder_fields(r)
    attention_bias, mlp_bias = bool(r.get("attention_bias", False)), bool(r.get("mlp_bias", False))
    if attention_bias != mlp_bias:
        raise r.unsupported(
            "attention_bias",
            f"attention_bias={attention_bias} with mlp_bias={mlp_bias}: our use_bias puts biases on both or neither",
        )
    return {**kw, "use_bias": attention_bias}


def _llama_hf(cfg: ModelConfig) -> dict[str, Any]:
    return {**decoder_hf(cfg), "attention_bias": cfg.use_bias, "mlp_bias": cfg.use_bias}


LLAMA = register(
    Family(
        name="llama",
        architectures=("LlamaForCausalLM",),
        to_config=_llama_config,
        to_hf=_llama_hf,
        links=block_links,
        derived=rotary_buffer,
    )
)
