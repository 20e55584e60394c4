"""The language-model-history notebook's corpus and counts (`ablation.lm_history`): the data-size
split holds plays out and nests the sizes; an n-gram's stored counts (its memory) against a naive count."""

import itertools
import pathlib

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation import lm_history
from transformer_jax.models.baselines.ngram import NGramLM

PLAYS = [(f"genre/play-{i}", f"P{i}:\n" + f"line {i} " * (i + 3) + "\n\n" + f"Q{i}:\nmore {i}\n\n") for i in range(23)]


def naive_stored_counts(sequences: list[list[int]], order: int) -> int:
    """Distinct m-grams for m = 1..order, plus Kneser-Ney's continuation entries: for m < order, the
    distinct m-grams seen after some token (the last m tokens of an (m+1)-gram)."""
    grams = lambda m: {tuple(s[i : i + m]) for s in sequences for i in range(len(s) - m + 1)}
    raw = sum(len(grams(m)) for m in range(1, order + 1))
    return raw + sum(len({g[1:] for g in grams(m + 1)}) for m in range(1, order))


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_the_ngrams_memory_is_its_distinct_ngrams_counted_naively(order):
    rng = np.random.default_rng(order)
    seqs = [rng.integers(0, 7, size=n).tolist() for n in (40, 3, 25)]
    lm = NGramLM.fit([np.asarray(s) for s in seqs], vocab_size=7, order=order)
    assert lm.n_entries == naive_stored_counts(seqs, order)


def test_a_sparse_ngrams_memory_grows_by_about_one_count_per_token_and_order():
    seq = np.random.default_rng(0).integers(0, 1000, size=2000)  # nearly every bigram is new
    sizes = [NGramLM.fit([seq], vocab_size=1000, order=n).n_entries for n in (2, 3, 4)]
    assert all(1900 < b - a < 2 * 2000 for a, b in itertools.pairwise(sizes))


def test_the_split_holds_out_every_tenth_play_and_nests_the_sizes():
    val, train = lm_history.split_plays(PLAYS, (0.1, 0.5, 1.0))
    assert val == "".join(PLAYS[i][1] for i in (0, 10, 20))
    assert all(f"P{i}:" not in train[1.0] for i in (0, 10, 20))
    assert sorted(train[1.0]) == sorted("".join(t for i, (_, t) in enumerate(PLAYS) if i % 10))
    assert train[1.0].startswith(train[0.5]) and train[0.5].startswith(train[0.1])
    assert all(t.endswith("\n\n") for t in train.values())  # a size ends with a whole speech
    assert abs(len(train[0.5]) - len(train[1.0]) / 2) < 40
    assert lm_history.split_plays(PLAYS, (0.5,), seed=1)[1][0.5] != train[0.5]  # the order follows the seed
    with pytest.raises(ValueError, match="fractions"):
        lm_history.split_plays(PLAYS, (0.0,))


def test_the_corpus_files_are_written_once_and_read_as_text_data(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_JAX_RUNS", str(tmp_path))
    monkeypatch.setattr(lm_history, "play_texts", lambda: PLAYS)
    first = lm_history.data_size_corpus((0.2, 1.0))
    assert first == lm_history.data_size_corpus((0.2, 1.0))
    assert first[0.2].val_path == first[1.0].val_path
    text = lambda p: pathlib.Path(p).read_text(encoding="utf-8")
    assert text(first[1.0].path).startswith(text(first[0.2].path))


def test_an_exact_count_is_judged_without_an_interval():
    assert lm_history.exact(5.0, "greater", 1.0).verdict == ablation.VERDICTS[0]
    assert lm_history.exact(0.5, "greater", 1.0).verdict == ablation.VERDICTS[1]
    assert lm_history.exact(5.0, "greater", 1.0).n == 1


def test_the_figure_draws_from_arm_records():
    rec = lambda loss, params: ablation.arm_record(
        {s: {"val loss": loss + s / 100, "parameters": params} for s in (0, 1)}
    )
    arms = {f"{o}-gram (BPE)": rec(5.0 - o / 10, 10**o) for o in (2, 3)}
    arms |= {f"window {w} (BPE)": rec(5.0 - w / 5, 1000 + w) for w in (1, 2)}
    arms |= {
        f"{a}, {f:.0%} of the plays": rec(2.0 - f, 100) for a in ("LSTM (2 layers)", "Transformer") for f in (0.1, 1.0)
    }
    fig = lm_history.figure(arms, (2, 3), (1, 2), (0.1, 1.0))
    assert [len(ax.lines) for ax in fig.axes] == [2 + 2, 2, 2 * 3]
