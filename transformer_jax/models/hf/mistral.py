"""Mistral (``model_type="mistral"``): LLaMA's layout without biases, every layer attending to a
sliding window of ``sliding_window`` tokens (null: full causal attention, as Mistral v0.2+)."""

from __future__ import annotations

from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import block_links, decoder_fields, decoder_hf, rotary_buffer
from transformer_jax.models.hf.spec import ConfigReader, Family, register
from transformer_jax.nn.attention_config import SlidingWindowAttention


def window_fields(r: ConfigReader) -> dict[str, Any]:
    """``sliding_window`` (tokens a query sees, itself included, as HF's mask) -> our window."""
    window = r.get("sliding_window")
    if window is None:
        return {}
    return {"attention": SlidingWindowAttention(window=int(window))}


def window_hf(cfg: ModelConfig) -> dict[str, Any]:
    window = cfg.attention.window if isinstance(cfg.attention, SlidingWindowAttention) else None
    return {"sliding_window": window}


def _config(r: ConfigReader) -> dict[str, Any]:
    return {**decoder_fields(r), **window_fields(r), "use_bias": False}


MISTRAL = register(
    Family(
        name="mistral",
        architectures=("MistralForCausalLM",),
        to_config=_config,
        to_hf=lambda cfg: {**decoder_hf(cfg), **window_hf(cfg)},
        links=block_links,
        derived=rotary_buffer,
    )
)
