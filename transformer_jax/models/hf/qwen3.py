"""Qwen3 (``model_type="qwen3"``): LLaMA's layout without biases, plus QK-norm: an RMSNorm with a
learned weight over head_dim on each query and key head, after the projections and before RoPE,
with the model's ``rms_norm_eps`` (our ``model.attention.qk_norm`` with ``norm="rmsnorm"`` is exactly that). The
head width is explicit (``head_dim``, not always hidden_size / heads). ``attention_bias`` (biases on
q, k, v and o but not the MLP) and the sliding window of the upper layers have no mapping and are
refused, as for Qwen2."""

from __future__ import annotations

from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import block_links, decoder_fields, decoder_hf, rotary_buffer
from transformer_jax.models.hf.qwen2 import full_attention_only
from transformer_jax.models.hf.spec import ConfigReader, Family, register
from transformer_jax.nn.attention_config import SoftmaxAttention


def qwen3_fields(r: ConfigReader) -> dict[str, Any]:
    """The ModelConfig fields Qwen3 and Qwen3-MoE share: LLaMA's decoder with QK-norm, no biases."""
    full_attention_only(r)
    r.expect(
        "attention_bias",
        (False,),
        "it puts biases on q, k, v and o but not the MLP; ours go on q/k/v only or on every linear layer",
    )
    return {**decoder_fields(r), "use_bias": False, "attention": SoftmaxAttention(qk_norm=True)}


def qwen3_hf(cfg: ModelConfig) -> dict[str, Any]:
    return {**decoder_hf(cfg), "attention_bias": False, "use_sliding_window": False, "sliding_window": None}


QWEN3 = register(
    Family(
        name="qwen3",
        architectures=("Qwen3ForCausalLM",),
        to_config=qwen3_fields,
        to_hf=qwen3_hf,
        links=block_links,
        derived=rotary_buffer,
    )
)
