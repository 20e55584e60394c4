"""Hugging Face weights from a numpy state dict (kept for existing callers; the checkpoint reader
and writer are ``transformer_jax.models.hf``).

``sd`` is a plain ``{name: numpy array}`` (e.g. ``{k: v.numpy() for k, v in hf.state_dict().items()}``)
and the config a ``config.to_dict()``; the mappings are those of ``models.hf.gpt2`` / ``models.hf.llama``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf import config_from_hf, load_state_dict


def gpt2_config(hf_config: Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """ModelConfig of a Hugging Face ``GPT2Config`` dict."""
    return config_from_hf({**hf_config, "model_type": "gpt2"}, **overrides)


def llama_config(hf_config: Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """ModelConfig of a Hugging Face ``LlamaConfig`` dict."""
    return config_from_hf({**hf_config, "model_type": "llama"}, **overrides)


def load_gpt2(model, sd: Mapping[str, np.ndarray]) -> None:
    """Copies GPT2LMHeadModel weights into a DecoderLM in place."""
    load_state_dict(model, sd, "gpt2")


def load_llama(model, sd: Mapping[str, np.ndarray]) -> None:
    """Copies LlamaForCausalLM weights into a DecoderLM in place."""
    load_state_dict(model, sd, "llama")
