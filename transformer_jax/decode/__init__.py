"""Decoding: KV-cached generation with greedy / temperature / top-k / top-p selection."""

from transformer_jax.decode.generate import generate
from transformer_jax.decode.strategies import STRATEGIES, SamplingConfig, pick, top_k_logits, top_p_logits

__all__ = ["STRATEGIES", "SamplingConfig", "generate", "pick", "top_k_logits", "top_p_logits"]
