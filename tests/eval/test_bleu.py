"""Corpus BLEU against a hand computation of Papineni et al.'s formula."""

import collections
import math

import pytest

from transformer_jax.eval import corpus_bleu


def _ngrams(words, n):
    return collections.Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _bleu_by_hand(hyps, refs):
    """Clipped n-gram precisions (n = 1..4) over the corpus, geometric mean, brevity penalty."""
    matches, totals = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_p)


def test_matches_the_formula():
    # Space-separated words without punctuation, so sacrebleu's 13a tokenizer changes nothing.
    hyps = ["the cat sat on the mat today", "a dog runs in the green park", "two men are playing chess"]
    refs = ["the cat sat on a mat today", "a dog is running in the green park", "two men are playing chess outside"]
    got = corpus_bleu(hyps, refs)
    assert got["bleu"] == pytest.approx(_bleu_by_hand(hyps, refs), abs=1e-6)
    assert got["bp"] < 1.0  # the hypotheses are shorter
    assert "nrefs:1" in got["signature"] and "tok:13a" in got["signature"]


def test_identical_is_100_and_disjoint_is_0():
    lines = ["A man in a blue shirt is standing on a ladder.", "Two dogs play in the snow."]
    assert corpus_bleu(lines, lines)["bleu"] == pytest.approx(100.0)
    assert corpus_bleu(["x y z w v"] * 2, lines)["bleu"] < 1.0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="newline"):
        corpus_bleu(["a\nb"], ["a"])
