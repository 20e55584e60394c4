"""distinct-n and self-BLEU against naive references written out here."""

import math
from collections import Counter

import numpy as np
import pytest

from transformer_jax.eval import chunks, distinct_n, mean_self_bleu, self_bleu

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def _random_texts(seed: int, count: int, length: int = 12) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS[:4], size=length)) for _ in range(count)]


def _naive_distinct(texts, n):
    seen, total = [], 0
    for t in texts:
        w = t.split()
        for i in range(len(w) - n + 1):
            total += 1
            if w[i : i + n] not in seen:
                seen.append(w[i : i + n])
    return len(seen) / total


def _naive_bleu(hyp: str, refs: list[str]) -> float:
    """Papineni et al.'s sentence BLEU with every precision non-zero (no smoothing needed): clipped
    n-gram precisions (max count over the references), brevity penalty by the closest reference length."""
    h = hyp.split()
    logs = []
    for n in range(1, 5):
        grams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
        best = Counter()
        for r in refs:
            w = r.split()
            for g, c in Counter(tuple(w[i : i + n]) for i in range(len(w) - n + 1)).items():
                best[g] = max(best[g], c)
        matched = sum(min(c, best[g]) for g, c in grams.items())
        assert matched > 0, "the naive reference needs every precision > 0"
        logs.append(math.log(matched / sum(grams.values())))
    closest = min((abs(len(r.split()) - len(h)), len(r.split())) for r in refs)[1]
    bp = 1.0 if len(h) > closest else math.exp(1 - closest / len(h))
    return 100 * bp * math.exp(sum(logs) / 4)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_distinct_n_matches_a_naive_count(n):
    texts = [*_random_texts(0, 5), "a", ""]
    assert distinct_n(texts, n) == pytest.approx(_naive_distinct(texts, n))


def test_distinct_n_extremes():
    assert distinct_n(["a b c d"], 2) == 1.0
    assert distinct_n(["a a a a a"], 1) == pytest.approx(1 / 5)
    assert distinct_n(["a b", "a b"], 2) == 0.5  # the same bigram in two outputs counts once
    assert math.isnan(distinct_n(["a", "b"], 2))
    with pytest.raises(ValueError):
        distinct_n(["a"], 0)


def test_self_bleu_matches_a_naive_bleu_of_each_text_against_the_others():
    texts = _random_texts(1, 4, length=30)
    naive = np.mean([_naive_bleu(t, texts[:i] + texts[i + 1 :]) for i, t in enumerate(texts)])
    assert self_bleu(texts) == pytest.approx(naive, rel=1e-9)


def test_self_bleu_extremes_and_groups():
    assert self_bleu(["a b c d e", "a b c d e", "a b c d e"]) == pytest.approx(100.0)
    assert self_bleu(["a b c d e", "f g h i j"]) < 1.0
    groups = [_random_texts(2, 3, 30), _random_texts(3, 4, 30)]
    assert mean_self_bleu(groups) == pytest.approx((self_bleu(groups[0]) + self_bleu(groups[1])) / 2)
    with pytest.raises(ValueError):
        self_bleu(["only one"])


def test_chunks_drop_a_last_group_too_small_to_compare():
    assert chunks(list("abcdefg"), 3) == [["a", "b", "c"], ["d", "e", "f"]]
    assert chunks(list("abcdefgh"), 3)[-1] == ["g", "h"]
