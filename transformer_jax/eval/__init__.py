"""Evaluation: token-weighted perplexity over a split, corpus BLEU (sacrebleu) of translations,
distinct-n and self-BLEU of generated text (``diversity``)."""

from transformer_jax.eval.bleu import corpus_bleu
from transformer_jax.eval.diversity import chunks, distinct_n, mean_self_bleu, self_bleu
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
    "chunks",
    "corpus_bleu",
    "distinct_n",
    "mean_self_bleu",
    "perplexity",
    "reference_pairs",
    "self_bleu",
    "translate_ids",
    "translate_texts",
    "validation_bleu",
]
