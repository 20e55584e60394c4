"""Diversity of generated text: distinct-n (Li et al. 2016) and self-BLEU (Zhu et al. 2018).

Both read detokenized outputs as one string each. distinct-n counts whitespace words; self-BLEU is
sacrebleu's sentence BLEU (13a tokenizer, exponential smoothing, effective order), as `corpus_bleu`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ngrams(text: str, n: int) -> list[tuple[str, ...]]:
    """The word n-grams of one text, in order (none when it has fewer than n words)."""
    if n < 1:
        raise ValueError(f"n={n}: an n-gram has at least one word")
    words = text.split()
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of ``texts`` (n-grams within each text, pooled over the
    texts): 1 when no n-gram repeats, small when the outputs reuse the same phrases; NaN when the
    texts hold no n-gram at all."""
    pooled = [g for t in texts for g in ngrams(t, n)]
    return len(set(pooled)) / len(pooled) if pooled else math.nan


def self_bleu(texts: Sequence[str]) -> float:
    """The mean sentence BLEU (0-100) of each text against all the other texts as its references:
    100 when all are the same, low when they share few n-grams. Needs at least two texts."""
    from sacrebleu.metrics.bleu import BLEU

    if len(texts) < 2:
        raise ValueError(f"self-BLEU compares texts with each other: {len(texts)} given, need >= 2")
    metric = BLEU(effective_order=True)
    others = lambda i: [t for j, t in enumerate(texts) if j != i]
    return sum(metric.sentence_score(t, others(i)).score for i, t in enumerate(texts)) / len(texts)


def mean_self_bleu(groups: Sequence[Sequence[str]]) -> float:
    """`self_bleu` of each group, averaged over the groups: e.g. several samples per source (how
    much a decoder's outputs for one source vary), or chunks of one output per source (how alike
    its outputs for different sources are)."""
    if not groups:
        raise ValueError("no groups of texts")
    return sum(self_bleu(g) for g in groups) / len(groups)


def chunks(texts: Sequence[str], size: int) -> list[list[str]]:
    """``texts`` in consecutive groups of ``size`` (the last one dropped if shorter than 2)."""
    out = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
    return [g for g in out if len(g) >= 2]
