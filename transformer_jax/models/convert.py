"""Loading Hugging Face checkpoints (GPT-2, LLaMA) into our models.

Functions take a plain ``{name: numpy array}`` state dict (e.g. ``{k: v.numpy() for k, v in
hf_model.state_dict().items()}``), so this module needs neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer_jax.models.config import ModelConfig


def _set(var: nnx.Variable, value: np.ndarray, name: str) -> None:
    value = np.asarray(value)
    if tuple(var.shape) != value.shape:
        raise ValueError(f"{name}: checkpoint shape {value.shape} does not match the model's {tuple(var.shape)}")
    var[...] = jnp.asarray(value, var.dtype)


def _layers(model) -> list:
    if model.cfg.scan_layers:
        raise ValueError("load weights into a model with scan_layers=False (then convert if needed)")
    return list(model.layers.layers)


def gpt2_config(hf_config: Mapping, **overrides) -> ModelConfig:
    """ModelConfig of a Hugging Face ``GPT2Config`` (as a dict: ``hf.config.to_dict()``)."""
    act = hf_config.get("activation_function", "gelu_new")
    ffn = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}[act]
    d = hf_config["n_embd"]
    cfg = ModelConfig(
        kind="decoder_lm",
        vocab_size=hf_config["vocab_size"],
        d_model=d,
        n_heads=hf_config["n_head"],
        d_ff=hf_config.get("n_inner") or 4 * d,
        n_layers=hf_config["n_layer"],
        max_len=hf_config["n_positions"],
        placement="pre",
        norm="layernorm",
        norm_eps=hf_config.get("layer_norm_epsilon", 1e-5),
        position="learned",
        ffn=ffn,
        use_bias=True,
        tie_embeddings=True,
    )
    return dataclasses.replace(cfg, **overrides)


def load_gpt2(model, sd: Mapping[str, np.ndarray]) -> None:
    """Copies GPT2LMHeadModel weights (Conv1D kernels are [in, out]) into a DecoderLM in place."""
    cfg = model.cfg
    D, H, Dh = cfg.d_model, cfg.n_heads, cfg.resolved_head_dim
    p = "transformer." if "transformer.wte.weight" in sd else ""
    _set(model.embed.embedding, sd[f"{p}wte.weight"], "wte")
    _set(model.positions.table, sd[f"{p}wpe.weight"], "wpe")
    for i, blk in enumerate(_layers(model)):
        q = f"{p}h.{i}."
        w_qkv, b_qkv = np.asarray(sd[q + "attn.c_attn.weight"]), np.asarray(sd[q + "attn.c_attn.bias"])
        for j, proj in enumerate((blk.self_attn.q, blk.self_attn.k, blk.self_attn.v)):
            _set(proj.kernel, w_qkv[:, j * D : (j + 1) * D].reshape(D, H, Dh), f"h.{i}.attn.c_attn")
            _set(proj.bias, b_qkv[j * D : (j + 1) * D].reshape(H, Dh), f"h.{i}.attn.c_attn.bias")
        _set(blk.self_attn.o.kernel, np.asarray(sd[q + "attn.c_proj.weight"]).reshape(H, Dh, D), f"h.{i}.attn.c_proj")
        _set(blk.self_attn.o.bias, sd[q + "attn.c_proj.bias"], f"h.{i}.attn.c_proj.bias")
        for norm, name in ((blk.self_attn_norm, "ln_1"), (blk.ffn_norm, "ln_2")):
            _set(norm.scale, sd[q + f"{name}.weight"], f"h.{i}.{name}")
            _set(norm.bias, sd[q + f"{name}.bias"], f"h.{i}.{name}.bias")
        _set(blk.ffn.w_in.kernel, sd[q + "mlp.c_fc.weight"], f"h.{i}.mlp.c_fc")
        _set(blk.ffn.w_in.bias, sd[q + "mlp.c_fc.bias"], f"h.{i}.mlp.c_fc.bias")
        _set(blk.ffn.w_out.kernel, sd[q + "mlp.c_proj.weight"], f"h.{i}.mlp.c_proj")
        _set(blk.ffn.w_out.bias, sd[q + "mlp.c_proj.bias"], f"h.{i}.mlp.c_proj.bias")
    _set(model.final_norm.scale, sd[f"{p}ln_f.weight"], "ln_f")
    _set(model.final_norm.bias, sd[f"{p}ln_f.bias"], "ln_f.bias")


def llama_config(hf_config: Mapping, **overrides) -> ModelConfig:
    """ModelConfig of a Hugging Face ``LlamaConfig`` dict (no rope_scaling support here)."""
    d, h = hf_config["hidden_size"], hf_config["num_attention_heads"]
    rope = hf_config.get("rope_parameters") or {}
    theta = rope.get("rope_theta", hf_config.get("rope_theta", 10000.0))
    cfg = ModelConfig(
        kind="decoder_lm",
        vocab_size=hf_config["vocab_size"],
        d_model=d,
        n_heads=h,
        n_kv_heads=hf_config.get("num_key_value_heads") or h,
        head_dim=hf_config.get("head_dim") or d // h,
        d_ff=hf_config["intermediate_size"],
        n_layers=hf_config["num_hidden_layers"],
        max_len=hf_config["max_position_embeddings"],
        placement="pre",
        norm="rmsnorm",
        norm_eps=hf_config["rms_norm_eps"],
        position="rope",
        rope_theta=float(theta),
        rope_pairing="split",
        ffn="swiglu",
        use_bias=bool(hf_config.get("attention_bias", False)),
        tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
    )
    return dataclasses.replace(cfg, **overrides)


def load_llama(model, sd: Mapping[str, np.ndarray]) -> None:
    """Copies LlamaForCausalLM weights (torch Linear kernels are [out, in]) into a DecoderLM."""
    cfg = model.cfg
    D, H, K, Dh = cfg.d_model, cfg.n_heads, cfg.resolved_kv_heads, cfg.resolved_head_dim
    p = "model." if "model.embed_tokens.weight" in sd else ""
    t = lambda name: np.asarray(sd[name]).T
    _set(model.embed.embedding, sd[f"{p}embed_tokens.weight"], "embed_tokens")
    for i, blk in enumerate(_layers(model)):
        q = f"{p}layers.{i}."
        _set(blk.self_attn.q.kernel, t(q + "self_attn.q_proj.weight").reshape(D, H, Dh), f"layers.{i}.q_proj")
        _set(blk.self_attn.k.kernel, t(q + "self_attn.k_proj.weight").reshape(D, K, Dh), f"layers.{i}.k_proj")
        _set(blk.self_attn.v.kernel, t(q + "self_attn.v_proj.weight").reshape(D, K, Dh), f"layers.{i}.v_proj")
        _set(blk.self_attn.o.kernel, t(q + "self_attn.o_proj.weight").reshape(H, Dh, D), f"layers.{i}.o_proj")
        _set(blk.self_attn_norm.scale, sd[q + "input_layernorm.weight"], f"layers.{i}.input_layernorm")
        _set(blk.ffn_norm.scale, sd[q + "post_attention_layernorm.weight"], f"layers.{i}.post_attention_layernorm")
        _set(blk.ffn.w_gate.kernel, t(q + "mlp.gate_proj.weight"), f"layers.{i}.gate_proj")
        _set(blk.ffn.w_in.kernel, t(q + "mlp.up_proj.weight"), f"layers.{i}.up_proj")
        _set(blk.ffn.w_out.kernel, t(q + "mlp.down_proj.weight"), f"layers.{i}.down_proj")
    _set(model.final_norm.scale, sd[f"{p}norm.weight"], "norm")
    if model.lm_head is not None:
        _set(model.lm_head.kernel, t("lm_head.weight"), "lm_head")
