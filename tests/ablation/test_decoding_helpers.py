"""The decoding notebook's helpers that turn per-model numbers into comparisons (`ablation.decoding`)."""

import math

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation.decoding import (
    SAMPLED,
    corpus_self_bleu,
    loglog_or_unmeasured,
    nan_for_none,
    paired_measured,
    strategy_figure,
    strategy_table,
)


def test_paired_measured_is_paired_where_every_value_is_defined():
    a, b = [0.30, 0.31, 0.29], [0.40, 0.42, 0.41]
    got, want = paired_measured(a, b, expect="less"), ablation.paired(a, b, expect="less")
    assert (got.mean, got.low, got.high, got.n) == (want.mean, want.low, want.high, want.n)


def test_paired_measured_leaves_an_undefined_measure_unmeasured():
    c = paired_measured([0.3, math.nan, 0.3], [0.4, 0.4, 0.4], expect="less")
    assert c.n == 0 and c.method.startswith("not measured") and c.verdict == "inconclusive"


def test_loglog_or_unmeasured():
    x = [256, 512, 1024]
    assert loglog_or_unmeasured(x, np.asarray(x) ** 2.0, expect="greater", reference=1.5).mean == pytest.approx(2.0)
    assert loglog_or_unmeasured(x, [1.0, -0.1, 2.0], expect="greater").method.startswith("not measured")


def test_nan_for_none_undoes_json():
    back = nan_for_none({"a": None, "b": [1.0, None], "c": {"d": 2}})
    assert math.isnan(back["a"]) and math.isnan(back["b"][1]) and back["b"][0] == 1.0 and back["c"] == {"d": 2}


def test_corpus_self_bleu_is_nan_without_two_outputs_in_a_chunk_or_any_word():
    assert math.isnan(corpus_self_bleu(["a cat"])) and math.isnan(corpus_self_bleu(["", " "]))
    assert corpus_self_bleu(["a cat sat on the mat"] * 3) == pytest.approx(100.0)


def _record(bleu: float, d2: float) -> dict:
    row = {"bleu": bleu, "self-bleu": 100.0, "distinct-2": d2, "corpus self-bleu": 9.0, "words": 11.0}
    return {
        "greedy": {"bleu": bleu, "distinct-1": 0.2, "distinct-2": d2},
        "beam": {"bleu": bleu + 1, "distinct-1": 0.2, "distinct-2": d2},
        "greedy on the subset": {**row, "distinct-1": 0.3},
        "beam on the subset": row,
        "reference": {"words": 12.0, "distinct-1": 0.3, "distinct-2": 0.6, "corpus self-bleu": 7.0},
        "reference on the subset": {"words": 12.0, "distinct-1": 0.4, "distinct-2": 0.7, "corpus self-bleu": 6.0},
        "samplers": {"top-2 uniform": {**row, "self-bleu": 40.0}},
    }


def test_strategy_table_means_over_the_models_searches_over_all_sources_and_the_first():
    table = strategy_table([_record(30.0, 0.4), _record(32.0, 0.6)])
    assert list(table) == [
        "greedy",
        "beam 4",
        "references",
        "top-2 uniform",
        "greedy, first sources",
        "beam 4, first sources",
        "references, first sources",
    ]
    assert table["beam 4"]["bleu"] == pytest.approx(32.0) and table["greedy"]["distinct-2"] == pytest.approx(0.5)
    assert table["top-2 uniform"]["self-bleu"] == pytest.approx(40.0)
    assert set(table["greedy, first sources"]) == set(SAMPLED)  # the sampler's numbers only, on the same sources
    assert table["references"]["distinct-2"] == pytest.approx(0.6) and "bleu" not in table["references"]
    assert table["references, first sources"] == {"words": 12.0, "distinct-2": 0.7, "corpus self-bleu": 6.0}


def test_strategy_figure_marks_the_decoders_with_a_bleu_and_draws_not_the_references():
    table = strategy_table([_record(30.0, 0.4), _record(32.0, 0.6)])
    names = {t.get_text() for t in strategy_figure(table).axes[0].texts}
    assert names == {"top-2 uniform", "greedy, first sources", "beam 4, first sources"}


def test_observed_power_reads_the_runs_sd_against_the_registered_one():
    import statistics

    registered = ablation.Power(sd=0.605, effect=1.0, pilot="assumed")
    a, b = [30.1, 31.0, 29.5, 30.4], [29.0, 30.2, 29.9, 29.1]
    sd = statistics.stdev(x - y for x, y in zip(a, b))
    text = ablation.decoding.observed_power(a, b, registered)
    expected = ablation.Power(sd=sd, effect=1.0, pilot="the run").achieved(4)
    assert text == f"; sd of the difference {sd:.3f} (registered 0.605): power {expected:.2f} for 1"
    assert expected < registered.achieved(4)  # a larger sd than assumed: less power than registered
    assert ablation.decoding.observed_power([1.0], [0.0], registered) == ""  # one pair: no sd
    assert ablation.decoding.observed_power([1.0, float("nan")], [0.0, 0.0], registered) == ""
