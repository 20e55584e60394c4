"""Decoding: KV-cached generation inside ``jax.jit`` for both model families, with greedy /
temperature / top-k / top-p selection (``strategies``: `Greedy`, `Sample`, `TopK`, `TopP`, the
variants of `SamplingConfig`) or beam search (``beam``)."""

from transformer_jax.decode.beam import BeamOutput, length_penalty
from transformer_jax.decode.generate import beam_search, generate
from transformer_jax.decode.loop import CachedLM, Generation
from transformer_jax.decode.seq2seq import translate, translate_beam
from transformer_jax.decode.strategies import (
    Greedy,
    Sample,
    SamplingConfig,
    TopK,
    TopP,
    pick,
    top_k_logits,
    top_p_logits,
)

__all__ = [
    "BeamOutput",
    "CachedLM",
    "Generation",
    "Greedy",
    "Sample",
    "SamplingConfig",
    "TopK",
    "TopP",
    "beam_search",
    "generate",
    "length_penalty",
    "pick",
    "top_k_logits",
    "top_p_logits",
    "translate",
    "translate_beam",
]
