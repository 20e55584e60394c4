"""``shakespeare_char`` with LLaMA's choices at the same budget: RMSNorm, RoPE, SwiGLU (d_ff
chosen so the parameter count matches the GELU model), no biases."""

import dataclasses

from transformer_jax.models import get_preset
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.recipes.shakespeare_char import get_config as base_config


def get_config():
    cfg = base_config()
    model = get_preset(
        "llama_tiny",
        vocab_size=cfg.model.dims.vocab_size,
        d_model=128,
        n_heads=4,
        n_kv_heads=4,
        d_ff=344,
        n_layers=4,
        max_len=64,
        embeddings=EmbeddingsConfig(tie=True),
    )
    return dataclasses.replace(cfg, name="shakespeare_char_llama", model=model)
