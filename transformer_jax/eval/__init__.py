"""Evaluation: token-weighted perplexity over a split, corpus BLEU (sacrebleu) of translations."""

from transformer_jax.eval.bleu import corpus_bleu
from transformer_jax.eval.perplexity import perplexity
from transformer_jax.eval.translation import (
    Beam,
    Sampled,
    TranslateConfig,
    TranslateSearch,
    bleu_on_split,
    reference_pairs,
    translate_ids,
    translate_texts,
    validation_bleu,
)

__all__ = [
    "Beam",
    "Sampled",
    "TranslateConfig",
    "TranslateSearch",
    "bleu_on_split",
    "corpus_bleu",
    "perplexity",
    "reference_pairs",
    "translate_ids",
    "translate_texts",
    "validation_bleu",
]
