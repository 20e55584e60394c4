"""Corpus BLEU (Papineni et al. 2002) with sacrebleu (Post 2018) on detokenized text."""

from __future__ import annotations

from collections.abc import Sequence


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], **bleu_options) -> dict:
    """sacrebleu's corpus BLEU of one hypothesis per reference (default options: 13a tokenizer,
    exponential smoothing, case-sensitive); returns ``bleu`` (0-100), its ``signature``, the
    n-gram ``precisions``, brevity penalty ``bp`` and the hypothesis/reference lengths."""
    from sacrebleu.metrics.bleu import BLEU

    hyps, refs = list(hypotheses), list(references)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references; give one hypothesis per reference")
    if any("\n" in h for h in hyps):
        raise ValueError("a hypothesis contains a newline; give one line per sentence")
    metric = BLEU(**bleu_options)
    score = metric.corpus_score(hyps, [refs])
    return {
        "bleu": float(score.score),
        "signature": str(metric.get_signature()),
        "precisions": [float(p) for p in score.precisions],
        "bp": float(score.bp),
        "sys_len": int(score.sys_len),
        "ref_len": int(score.ref_len),
    }
