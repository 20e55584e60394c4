"""Decoding: KV-cached generation inside ``jax.jit`` for both model families, with greedy /
temperature / top-k / top-p selection (``strategies``) or beam search (``beam``)."""

from transformer_jax.decode.beam import BeamOutput, length_penalty
from transformer_jax.decode.generate import beam_search, generate
from transformer_jax.decode.loop import CachedLM, Generation
from transformer_jax.decode.seq2seq import translate, translate_beam
from transformer_jax.decode.strategies import STRATEGIES, SamplingConfig, pick, top_k_logits, top_p_logits

__all__ = [
    "STRATEGIES",
    "BeamOutput",
    "CachedLM",
    "Generation",
    "SamplingConfig",
    "beam_search",
    "generate",
    "length_penalty",
    "pick",
    "top_k_logits",
    "top_p_logits",
    "translate",
    "translate_beam",
]
