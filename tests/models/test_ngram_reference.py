"""Trigram LM probabilities and evaluation loss on a tiny corpus, computed by hand (comments and
literal fractions) for each smoothing of ``NgramConfig``: interpolated Kneser-Ney with a fixed
discount, Kneser-Ney with the estimated per-order discounts (the default), add-k. The package's
``NGramLM`` and ``train.ngram.score`` must reproduce them."""

import math
from fractions import Fraction as Fr

import numpy as np
import pytest

from transformer_jax.models import AddKSmoothing, KneserNeySmoothing, NgramConfig, NGramLM, baseline_model_config
from transformer_jax.train.ngram import score

A, B, C = 0, 1, 2  # V = 3
TRAIN = [[A, A, B, A, B, C], [C, A]]  # "a a b a b c" and "c a": no n-gram spans the two
# Counts (by hand):
#   unigrams  a 4, b 2, c 2                          (8 tokens, 3 types)
#   bigrams   aa 1, ab 2, ba 1, bc 1, ca 1           (6; "c c" across the sequences is not one)
#   trigrams  aab 1, aba 1, bab 1, abc 1             (4)
#   continuation N1+(. w) over the distinct bigrams: a <- {a, b, c} 3, b <- {a} 1, c <- {b} 1
#                                                    (total 5, 3 types)
#   continuation N1+(. u w) over the distinct trigrams: ab <- {a, b} 2, ba <- {a} 1, bc <- {a} 1
#                                                    (history a: total 2, 1 type; history b:
#                                                     total 2, 2 types; history c: none)
#
# Evaluation row: segment 1 "a b a c", segment 2 "c c b", one padding position (weight 0).
# Each target is conditioned on at most the 2 preceding tokens of its own segment:
#   b | a,   a | a b,   c | b a,   c | c (segment 2 starts: "a c" is not its history),   b | c c
INPUTS = [A, B, A, C, C, 0]
TARGETS = [B, A, C, C, B, 0]
SEGMENTS = [1, 1, 1, 2, 2, 0]
WEIGHTS = [1, 1, 1, 1, 1, 0]

# --- Kneser-Ney, discount D = 1/2 at every level -------------------------------------------------
# Unigram (continuation counts, then uniform 1/3): P1(w) = (N(w) - 1/2) / 5 + (1/2 * 3 / 5) / 3
#   P1(a) = 5/10 + 1/10 = 3/5,  P1(b) = 1/10 + 1/10 = 1/5,  P1(c) = 1/5
# Bigram level of a trigram context (continuation counts of pairs), history u:
#   u = a (total 2, 1 type, lambda = 1/2 * 1 / 2 = 1/4):
#       P2(b|a) = (3/2) / 2 + 1/4 * 1/5 = 4/5,  P2(a|a) = 1/4 * 3/5 = 3/20,  P2(c|a) = 1/20
#   u = b (total 2, 2 types, lambda = 1/2):
#       P2(a|b) = (1/2) / 2 + 1/2 * 3/5 = 11/20,  P2(c|b) = 1/4 + 1/10 = 7/20,  P2(b|b) = 1/10
#   u = c: never a continuation history -> P1
# Trigram level (raw counts), history (u, v):
#   ab (total 2, 2 types, lambda 1/2): P(a|ab) = 1/4 + 1/2 * 11/20 = 21/40,
#                                      P(c|ab) = 1/4 + 1/2 * 7/20 = 17/40, P(b|ab) = 1/20
#   ba (total 1, 1 type, lambda 1/2):  P(c|ba) = 0 + 1/2 * P2(c|a) = 1/40
#   cc never seen -> P2(.|c) -> P1:    P(b|cc) = 1/5
# One-token history at a segment start: raw bigram counts over P1, history v:
#   a (aa 1, ab 2: total 3, 2 types, lambda = 1/2 * 2 / 3 = 1/3):
#       P(a|a) = (1/2) / 3 + 1/3 * 3/5 = 11/30,  P(b|a) = (3/2) / 3 + 1/3 * 1/5 = 17/30,
#       P(c|a) = 1/3 * 1/5 = 1/15
#   c (ca 1: total 1, 1 type, lambda 1/2): P(c|c) = 1/2 * 1/5 = 1/10, P(a|c) = 1/2 + 3/10 = 4/5
# No history (raw unigram counts, total 8, 3 types, lambda = 1/2 * 3 / 8 = 3/16):
#   P(a) = (7/2) / 8 + 3/16 / 3 = 1/2,  P(b) = (3/2) / 8 + 1/16 = 1/4,  P(c) = 1/4
KN_HALF = dict(
    targets=[Fr(17, 30), Fr(21, 40), Fr(1, 40), Fr(1, 10), Fr(1, 5)],
    distributions={
        (): [Fr(1, 2), Fr(1, 4), Fr(1, 4)],
        (A,): [Fr(11, 30), Fr(17, 30), Fr(1, 15)],
        (C,): [Fr(4, 5), Fr(1, 10), Fr(1, 10)],
        (A, B): [Fr(21, 40), Fr(1, 20), Fr(17, 40)],
        (C, C): [Fr(3, 5), Fr(1, 5), Fr(1, 5)],
    },
    # argmax of each target's context: b | a (17/30) right, a | ab (21/40) right, b | ba wrong,
    # a | c wrong, a | cc wrong
    accuracy=Fr(2, 5),
)

# --- Kneser-Ney with the default discounts, D = n1 / (n1 + 2 n2) per table, clipped to [0.05, 1] -
#   raw unigrams {4, 2, 2}: 0 / 4 -> 0.05;  raw bigrams {1, 2, 1, 1, 1}: 4 / 6 = 2/3;
#   raw trigrams {1, 1, 1, 1}: 4 / 4 = 1;   continuation unigrams {3, 1, 1}: 2 / 2 = 1;
#   continuation pairs {2, 1, 1}: 2 / 4 = 1/2.
DEFAULT_DISCOUNTS = dict(raw=[0.05, 2 / 3, 1.0], cont=[1.0, 0.5])
# P1 with D = 1: (N(w) - 1) / 5 + (1 * 3 / 5) / 3 = N(w) / 5: 3/5, 1/5, 1/5 (as above);
# P2 has D = 1/2: as above. Trigram level, D = 1 (nothing left of the counts):
#   P(a|ab) = 0 + (1 * 2 / 2) * P2(a|b) = 11/20;  P(c|ba) = 0 + (1 * 1 / 1) * P2(c|a) = 1/20
# One-token histories, D = 2/3:
#   a (total 3, 2 types, lambda = 2/3 * 2 / 3 = 4/9): P(b|a) = (4/3) / 3 + 4/9 * 1/5 = 8/15,
#       P(a|a) = (1/3) / 3 + 4/9 * 3/5 = 17/45,  P(c|a) = 4/9 * 1/5 = 4/45
#   c (total 1, 1 type, lambda 2/3):                  P(c|c) = 2/3 * 1/5 = 2/15
#   cc unseen -> P1(b) = 1/5
KN_DEFAULT = dict(
    targets=[Fr(8, 15), Fr(11, 20), Fr(1, 20), Fr(2, 15), Fr(1, 5)],
    distributions={
        (A,): [Fr(17, 45), Fr(8, 15), Fr(4, 45)],
        (A, B): [Fr(11, 20), Fr(1, 10), Fr(7, 20)],
    },
    accuracy=Fr(2, 5),  # same argmaxes as with D = 1/2
)

# --- add-k, k = 1/2: (c(h w) + 1/2) / (c(h .) + 3/2), the longest history only, no backoff ------
#   b | a:  (2 + 1/2) / (3 + 3/2) = 5/9      a | ab: (1 + 1/2) / (2 + 3/2) = 3/7
#   c | ba: (0 + 1/2) / (1 + 3/2) = 1/5      c | c:  (0 + 1/2) / (1 + 3/2) = 1/5
#   b | cc: (0 + 1/2) / (0 + 3/2) = 1/3 (history never seen: uniform)
ADD_HALF = dict(
    targets=[Fr(5, 9), Fr(3, 7), Fr(1, 5), Fr(1, 5), Fr(1, 3)],
    distributions={
        (): [Fr(9, 19), Fr(5, 19), Fr(5, 19)],  # (4 + 1/2) / (8 + 3/2), (2 + 1/2) / (19/2)
        (A,): [Fr(1, 3), Fr(5, 9), Fr(1, 9)],  # (1.5, 2.5, 0.5) / 4.5
        (A, B): [Fr(3, 7), Fr(1, 7), Fr(3, 7)],  # (1.5, 0.5, 1.5) / 3.5
    },
    accuracy=None,  # a | ab ties with c | ab: not asserted
)

CASES = {
    "kneser_ney_half": (NgramConfig(ngram_order=3, smoothing=KneserNeySmoothing(discount=0.5)), KN_HALF),
    "kneser_ney_default": (NgramConfig(ngram_order=3), KN_DEFAULT),
    "add_half": (NgramConfig(ngram_order=3, smoothing=AddKSmoothing(k=0.5)), ADD_HALF),
}


def _fit(baseline):
    """The model that ``model.baseline`` describes (validated by ``baseline_model_config``)."""
    baseline_model_config("ngram", baseline, vocab_size=3)
    return NGramLM.fit(
        [np.asarray(s) for s in TRAIN], vocab_size=3, order=baseline.ngram_order, **baseline.smoothing.fit_kwargs()
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_probabilities_match_hand_computation(case):
    """Conditional distributions (every level of the recursion, short and unseen histories):
    a wrong discount, lambda, continuation count or add-k denominator changes them."""
    baseline, expected = CASES[case]
    lm = _fit(baseline)
    for history, probs in expected["distributions"].items():
        np.testing.assert_allclose(lm.distribution(history), [float(p) for p in probs], atol=1e-12, err_msg=history)


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluation_loss_matches_hand_computation(case):
    """``score`` over one packed row: per-token log-probabilities with segment-local context,
    the weight-0 padding ignored, loss = mean -ln p (cross-entropy in nats), perplexity, accuracy."""
    baseline, expected = CASES[case]
    lm = _fit(baseline)
    batch = {k: np.asarray([v]) for k, v in (("inputs", INPUTS), ("targets", TARGETS))}
    batch |= {"segment_ids": np.asarray([SEGMENTS]), "weights": np.asarray([WEIGHTS], np.float32)}
    logp, _ = lm.row_log_probs(batch["inputs"], batch["targets"], batch["segment_ids"])
    np.testing.assert_allclose(logp[0, :5], [math.log(p) for p in expected["targets"]], atol=1e-12)

    out = score(lm, [batch], accuracy=expected["accuracy"] is not None)
    loss = -sum(math.log(p) for p in expected["targets"]) / 5
    assert out["tokens"] == 5
    assert out["loss"] == pytest.approx(loss, abs=1e-9)
    assert out["perplexity"] == pytest.approx(math.exp(loss), rel=1e-9)
    if expected["accuracy"] is not None:
        assert out["accuracy"] == pytest.approx(float(expected["accuracy"]), abs=1e-12)


def test_default_discounts_are_estimated_per_table():
    lm = _fit(NgramConfig(ngram_order=3))
    assert [t.discount for t in lm.raw] == pytest.approx(DEFAULT_DISCOUNTS["raw"], abs=1e-12)
    assert [t.discount for t in lm.cont] == pytest.approx(DEFAULT_DISCOUNTS["cont"], abs=1e-12)
