"""n-gram LM: normalisation, a hand-computed Kneser-Ney example, a naive reference, storage."""

import itertools
from collections import Counter

import numpy as np
import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.models import KneserNeySmoothing, NgramConfig, NGramLM, baseline_model_config

A, B, C, D = 0, 1, 2, 3
CORPUS = [A, B, A, C, A, B, B, A, C, A]  # "a b a c a b b a c a", V = 4 (d never occurs)


def _all_histories(V, max_len):
    for k in range(max_len + 1):
        yield from itertools.product(range(V), repeat=k)


@pytest.mark.parametrize("smoothing,discount", [("kneser_ney", None), ("kneser_ney", 0.7), ("add_k", None)])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_sum_to_one_for_every_context(order, smoothing, discount):
    rng = np.random.default_rng(order)
    V = 5
    seqs = [rng.integers(0, V - 1, size=n) for n in (30, 7, 2)]  # token V - 1 never occurs
    lm = NGramLM.fit(seqs, vocab_size=V, order=order, smoothing=smoothing, discount=discount, add_k=0.3)
    for hist in _all_histories(V, order - 1):  # seen, unseen and shorter-than-n-1 histories
        p = lm.distribution(hist)
        np.testing.assert_allclose(p.sum(), 1.0, atol=1e-12, err_msg=str(hist))
        assert np.all(p > 0), hist


def test_kneser_ney_bigram_matches_hand_computation():
    lm = NGramLM.fit([CORPUS], vocab_size=4, order=2, smoothing="kneser_ney", discount=0.5)
    # Bigram counts: ab 2, ba 2, ac 2, ca 2, bb 1 (9 bigrams).
    # c(a .) = 4 with 2 types {b, c}; c(b .) = 3 with 2 types {a, b}; c(c .) = 2 with 1 type {a}.
    # Continuation counts N1+(. w): a <- {b, c} = 2, b <- {a, b} = 2, c <- {a} = 1, d = 0; sum 5,
    # 3 types. Unigram level, D = 0.5, interpolated with uniform 1/4:
    #   lambda = 0.5 * 3 / 5 = 0.3, lambda / 4 = 0.075
    #   P1(a) = (2 - .5)/5 + .075 = 0.375, P1(b) = 0.375, P1(c) = (1 - .5)/5 + .075 = 0.175, P1(d) = 0.075
    p1 = {A: 0.375, B: 0.375, C: 0.175, D: 0.075}
    # History a: lambda_a = 0.5 * 2 / 4 = 0.25
    #   P(b|a) = 1.5/4 + .25 * .375 = 0.46875, P(c|a) = 1.5/4 + .25 * .175 = 0.41875,
    #   P(a|a) = .25 * .375 = 0.09375,          P(d|a) = .25 * .075 = 0.01875     (sum 1)
    np.testing.assert_allclose(lm.distribution([A]), [0.09375, 0.46875, 0.41875, 0.01875], atol=1e-12)
    # History b: lambda_b = 0.5 * 2 / 3 = 1/3
    #   P(a|b) = 1.5/3 + .375/3 = 0.625, P(b|b) = 0.5/3 + .375/3 = 0.291666..,
    #   P(c|b) = .175/3, P(d|b) = .075/3
    np.testing.assert_allclose(lm.distribution([B]), [0.625, 0.5 / 3 + 0.125, 0.175 / 3, 0.025], atol=1e-12)
    # History c: lambda_c = 0.5 * 1 / 2 = 0.25; P(a|c) = 1.5/2 + .25 * .375 = 0.84375
    np.testing.assert_allclose(lm.distribution([C])[A], 0.84375, atol=1e-12)
    # History d never occurs: the unigram level passes through.
    np.testing.assert_allclose(lm.distribution([D]), [p1[w] for w in range(4)], atol=1e-12)
    # No history (the first token of a row): raw unigram counts a 5, b 3, c 2 (10 tokens, 3 types)
    #   lambda = 0.5 * 3 / 10 = 0.15; P(a) = 4.5/10 + .15/4 = 0.4875
    np.testing.assert_allclose(lm.distribution([])[A], 0.4875, atol=1e-12)
    # Ney's estimate on the bigram counts {2, 2, 2, 2, 1}: n1 = 1, n2 = 4, D = 1 / (1 + 2 * 4) = 1/9
    assert NGramLM.fit([CORPUS], vocab_size=4, order=2).raw[1].discount == pytest.approx(1 / 9)


def _naive_kn(seqs, V, n, D):
    """Interpolated Kneser-Ney with Python dicts, straight from Chen & Goodman's equations."""
    counts = [Counter() for _ in range(n + 1)]
    for s in seqs:
        for m in range(1, n + 1):
            for i in range(len(s) - m + 1):
                counts[m][tuple(s[i : i + m])] += 1
    cont = [Counter() for _ in range(n + 1)]
    for m in range(1, n):
        for g in counts[m + 1]:
            cont[m][g[1:]] += 1

    def p(hist, w, top):
        k = len(hist)
        lower = 1.0 / V if k == 0 else p(hist[1:], w, False)
        table = counts[k + 1] if top else cont[k + 1]
        row = {g[-1]: c for g, c in table.items() if g[:-1] == hist}
        total = sum(row.values())
        if total == 0:
            return lower
        return max(row.get(w, 0) - D, 0) / total + D * len(row) / total * lower

    return lambda hist, w: p(tuple(hist), w, True)


def test_kneser_ney_trigram_matches_naive_reference():
    rng = np.random.default_rng(0)
    V = 4
    seqs = [list(rng.integers(0, V, size=40)), list(rng.integers(0, V - 1, size=9))]
    lm = NGramLM.fit([np.asarray(s) for s in seqs], vocab_size=V, order=3, discount=0.6)
    ref = _naive_kn(seqs, V, 3, 0.6)
    for hist in _all_histories(V, 2):
        np.testing.assert_allclose(lm.distribution(hist), [ref(hist, w) for w in range(V)], atol=1e-12)


def test_add_k_formula():
    lm = NGramLM.fit([CORPUS], vocab_size=4, order=2, smoothing="add_k", add_k=0.5)
    # (c(a w) + k) / (c(a .) + k V): c(a b) = 2, c(a .) = 4 -> 2.5 / 6
    np.testing.assert_allclose(lm.distribution([A]), [0.5 / 6, 2.5 / 6, 2.5 / 6, 0.5 / 6])
    np.testing.assert_allclose(lm.distribution([D]), [0.25] * 4)  # unseen history: uniform


def test_row_log_probs_use_the_rows_segment_context(tmp_path):
    rng = np.random.default_rng(1)
    lm = NGramLM.fit([rng.integers(0, 6, size=200)], vocab_size=6, order=3)
    inputs = rng.integers(0, 6, size=(2, 7))
    targets = rng.integers(0, 6, size=(2, 7))
    seg = np.array([[1, 1, 1, 2, 2, 2, 2], [1] * 7])
    logp, best = lm.row_log_probs(inputs, targets, seg, with_argmax=True)
    for b in range(2):
        for t in range(7):
            start = max(i for i in range(t + 1) if i == 0 or seg[b, i] != seg[b, i - 1])
            hist = inputs[b, max(start, t - 1) : t + 1]
            dist = lm.distribution(hist)
            assert logp[b, t] == pytest.approx(np.log(dist[targets[b, t]]), abs=1e-12)
            assert best[b, t] == np.argmax(dist)
    lm.save(str(tmp_path / "lm.npz"))
    again = NGramLM.load(str(tmp_path / "lm.npz"))
    np.testing.assert_array_equal(again.row_log_probs(inputs, targets, seg)[0], logp)
    assert again.n_entries == lm.n_entries


def test_errors_name_the_field():
    with pytest.raises(ConfigError, match="model.baseline.smoothing='witten_bell': unknown n-gram smoothing"):
        baseline_model_config("ngram", NgramConfig(smoothing="witten_bell"))  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigError, match="model.baseline.smoothing.discount"):
        baseline_model_config("ngram", NgramConfig(smoothing=KneserNeySmoothing(discount=1.5)))
    with pytest.raises(ConfigError, match="model.baseline.ngram_order"):
        baseline_model_config("ngram", NgramConfig(ngram_order=0))
    with pytest.raises(ConfigError, match="model.baseline"):
        baseline_model_config("ngram").__class__(kind="rnn_lm")
    with pytest.raises(ValueError, match="ngram_order=12"):
        NGramLM.fit([np.arange(50)], vocab_size=50, order=12)
