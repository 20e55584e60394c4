"""Qwen2 / Qwen2.5 (``model_type="qwen2"``): LLaMA's layout with biases on q, k and v only (not on
o or the MLP). Qwen2's optional sliding window on the layers from ``max_window_layers`` on
(``use_sliding_window``) has no mapping and is refused; when it is off, ``sliding_window`` and
``max_window_layers`` are unused by Hugging Face too."""

from __future__ import annotations

from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import block_links, decoder_fields, decoder_hf, rotary_buffer
from transformer_jax.models.hf.spec import ConfigReader, Family, register
from transformer_jax.nn.attention_config import SoftmaxAttention


def full_attention_only(r: ConfigReader) -> None:
    """Qwen's window keys, accepted only when every layer attends to the whole prefix (shared by
    Qwen2, Qwen3 and Qwen3-MoE): ``use_sliding_window`` false, ``layer_types`` all full."""
    r.expect("use_sliding_window", (False,), "Qwen's sliding window on the upper layers has no mapping")
    r.ignore("sliding_window", "max_window_layers")
    n = r.need("num_hidden_layers")
    types = r.get("layer_types", ["full_attention"] * n)
    if list(types) != ["full_attention"] * n:
        raise r.unsupported("layer_types", f"only full attention in every layer is supported for {r.family}")


def _config(r: ConfigReader) -> dict[str, Any]:
    full_attention_only(r)
    return {**decoder_fields(r), "use_bias": False, "attention": SoftmaxAttention(qkv_bias=True)}


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    return {**decoder_hf(cfg), "use_sliding_window": False, "sliding_window": None}


QWEN2 = register(
    Family(
        name="qwen2",
        architectures=("Qwen2ForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=block_links,
        derived=rotary_buffer,
    )
)
