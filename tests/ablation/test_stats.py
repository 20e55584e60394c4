"""The protocol's statistics (``transformer_jax.ablation.stats``) against numbers written here:
Student-t quantiles from tables, intervals computed by hand with numpy, verdicts on synthetic
samples whose answer is known, a bootstrap whose true difference is known, power laws of known
exponent."""

import math

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation import stats

HOLDS, FAILS, UNSURE = ablation.VERDICTS


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 3, 3.182446),
        (0.975, 4, 2.776445),
        (0.975, 9, 2.262157),
        (0.975, 30, 2.042272),
        (0.975, 1000, 1.962339),
        (0.95, 2, 2.919986),
        (0.95, 4, 2.131847),
        (0.995, 5, 4.032143),
        (0.5, 7, 0.0),
        (0.025, 4, -2.776445),
    ],
)
def test_t_quantile_matches_the_tables(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=2e-6)


def test_t_cdf_inverts_the_quantile_and_known_values():
    assert stats.t_cdf(0.0, 3) == 0.5
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)  # Cauchy: 1/2 + atan(1)/pi
    assert stats.t_cdf(2.0, 2) == pytest.approx(0.5 + 1 / math.sqrt(6), abs=1e-12)  # closed form, df 2
    for df in (1, 2.5, 7, 60):
        for p in (0.6, 0.9, 0.999):
            assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    assert stats.betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - sum_{k<2} C(4,k) .4^k .6^(4-k)
    with pytest.raises(ValueError, match="p=1"):
        stats.t_quantile(1.0, 3)


def test_paired_t_interval_by_hand():
    a = np.array([1.30, 1.42, 1.35, 1.51])
    b = np.array([1.20, 1.25, 1.30, 1.33])
    d = a - b
    half = 3.182446 * d.std(ddof=1) / np.sqrt(4)  # t_{0.975, 3}
    c = ablation.paired(a, b, expect="greater")
    assert (c.n, c.level, c.method) == (4, 0.95, "paired t")
    np.testing.assert_allclose([c.mean, c.low, c.high], [d.mean(), d.mean() - half, d.mean() + half], rtol=1e-6)
    assert c.samples == pytest.approx(tuple(d)) and c.verdict == HOLDS
    # an equivalence claim uses the 90% interval (two one-sided tests at 5%)
    e = ablation.paired(a, b, expect="equal", margin=0.5)
    half90 = 2.353363 * d.std(ddof=1) / 2  # t_{0.95, 3}
    np.testing.assert_allclose([e.low, e.high], [d.mean() - half90, d.mean() + half90], rtol=1e-6)
    one = ablation.paired([1.0], [0.5], expect="greater")
    assert (one.low, one.high, one.verdict) == (-math.inf, math.inf, UNSURE)  # n = 1: no interval


@pytest.mark.parametrize(
    ("diffs", "expect", "margin", "verdict"),
    [
        ([0.10, 0.12, 0.11, 0.09], "greater", None, HOLDS),
        ([0.10, 0.12, 0.11, 0.09], "less", None, FAILS),
        ([-0.10, -0.12, -0.11, -0.09], "greater", None, FAILS),
        ([-0.10, -0.12, -0.11, -0.09], "less", None, HOLDS),
        ([0.10, -0.12, 0.11, -0.09], "greater", None, UNSURE),
        ([0.10, -0.12, 0.11, -0.09], "less", None, UNSURE),
        ([0.01, -0.01, 0.005, -0.004], "equal", 0.05, HOLDS),  # 90% interval inside +-0.05
        ([0.30, 0.31, 0.29, 0.30], "equal", 0.05, FAILS),  # wholly above the margin
        ([0.01, -0.01, 0.005, -0.004], "equal", 0.005, UNSURE),  # straddles the narrow margin
        ([-0.02, -0.03, -0.01, -0.02], "not less", 0.05, HOLDS),  # no worse than -0.05
        ([-0.20, -0.21, -0.19, -0.20], "not less", 0.05, FAILS),
        ([0.02, 0.03, 0.01, 0.02], "not greater", 0.05, HOLDS),
        ([0.20, 0.21, 0.19, 0.20], "not greater", 0.05, FAILS),
        ([0.05, 0.30, -0.15, 0.10], "not greater", 0.05, UNSURE),
    ],
)
def test_verdict_on_synthetic_differences(diffs, expect, margin, verdict):
    base = np.array([1.5, 1.6, 1.4, 1.55])
    assert ablation.paired(base + np.array(diffs), base, expect=expect, margin=margin).verdict == verdict


def test_decide_at_the_edges_and_against_a_reference():
    assert ablation.decide(0.0, 1.0, "greater") == UNSURE  # touching zero does not exclude it
    assert ablation.decide(0.6, 0.9, "greater", reference=0.5) == HOLDS
    assert ablation.decide(0.1, 0.4, "greater", reference=0.5) == FAILS
    assert ablation.decide(0.96, 1.04, "equal", reference=1.0, margin=0.05) == HOLDS
    assert ablation.decide(0.94, 1.04, "equal", reference=1.0, margin=0.05) == UNSURE
    with pytest.raises(ValueError, match="needs margin"):
        ablation.decide(0.0, 1.0, "equal")
    with pytest.raises(ValueError, match="takes no margin"):
        ablation.paired([1.0, 2.0], expect="greater", margin=0.1)
    with pytest.raises(ValueError, match="expect='bigger'"):
        ablation.decide(0.0, 1.0, "bigger")


@pytest.mark.parametrize(
    "expect, margin, said, refuted, crossing",
    [  # an interval past the words' bound, and one crossing it
        ("greater", None, "95% interval wholly below 0.5", (0.1, 0.49), (0.1, 0.51)),
        ("less", None, "95% interval wholly above 0.5", (0.51, 0.9), (0.49, 0.9)),
        ("equal", 0.25, "90% interval wholly outside [0.25, 0.75]", (0.76, 0.9), (0.74, 0.9)),
        ("equal", 0.25, "90% interval wholly outside [0.25, 0.75]", (0.1, 0.24), (0.1, 0.26)),
        ("not less", 0.25, "90% interval wholly below 0.25", (0.1, 0.24), (0.1, 0.26)),
        ("not greater", 0.25, "90% interval wholly above 0.75", (0.76, 0.9), (0.74, 0.9)),
    ],
)
def test_the_refuting_interval_in_words_is_the_one_decide_refutes(expect, margin, said, refuted, crossing):
    assert ablation.refuting(expect, reference=0.5, margin=margin) == said
    assert ablation.decide(*refuted, expect, reference=0.5, margin=margin) == FAILS
    assert ablation.decide(*crossing, expect, reference=0.5, margin=margin) == UNSURE


def test_paired_refuses_unpaired_or_non_finite_values():
    with pytest.raises(ValueError, match="one value per seed"):
        ablation.paired([1.0, 2.0, 3.0], [1.0, 2.0], expect="less")
    with pytest.raises(ValueError, match="non-finite"):
        ablation.paired([1.0, math.inf], [1.0, 2.0], expect="less")


def test_combine_parts_of_a_claim():
    assert ablation.combine(HOLDS, HOLDS) == HOLDS
    assert ablation.combine(HOLDS, UNSURE) == UNSURE
    assert ablation.combine(UNSURE, FAILS, HOLDS) == FAILS
    assert ablation.combine() == UNSURE
    with pytest.raises(ValueError, match="'maybe'"):
        ablation.combine(HOLDS, "maybe")


def test_bootstrap_covers_a_known_difference_and_is_reproducible():
    rng = np.random.default_rng(0)
    items = rng.normal(size=400)
    a, b = items + 0.5 + 0.1 * rng.normal(size=400), items  # true paired difference 0.5
    c = ablation.paired_bootstrap(a, b, expect="greater", seed=3)
    assert c.n == 400 and c.low < 0.5 < c.high and c.high - c.low < 0.05 and c.verdict == HOLDS
    assert c == ablation.paired_bootstrap(a, b, expect="greater", seed=3)
    assert c != ablation.paired_bootstrap(a, b, expect="greater", seed=4)
    # the pairing matters: the items' own spread (sd 1) cancels; unpaired it would be ~0.14 wide
    same = ablation.paired_bootstrap(items + 0.01 * rng.normal(size=400), items, expect="greater")
    assert same.low < 0 < same.high and same.verdict == UNSURE


def test_bootstrap_with_a_statistic_of_rows():
    """A corpus statistic (here a ratio of sums, like BLEU's) is recomputed on each resample."""
    rng = np.random.default_rng(1)
    hits = rng.integers(0, 10, size=(200, 1)).astype(float)
    total = np.full((200, 1), 10.0)
    ratio = lambda rows: float(rows[:, 0].sum() / rows[:, 1].sum())
    a, b = np.hstack([np.minimum(hits + 1, 10), total]), np.hstack([hits, total])
    c = ablation.paired_bootstrap(a, b, expect="greater", statistic=ratio, n_boot=300)
    assert c.mean == pytest.approx(ratio(a) - ratio(b)) and 0 < c.low <= c.mean <= c.high
    with pytest.raises(ValueError, match="give a statistic"):
        ablation.paired_bootstrap(a, b, expect="greater")
    with pytest.raises(ValueError, match="same shape"):
        ablation.paired_bootstrap(a, b[:10], expect="greater", statistic=ratio)


def test_loglog_slope_of_known_power_laws():
    x = np.array([64.0, 128, 256, 512, 1024])
    lin = ablation.loglog_slope(x, 0.003 * x, expect="not greater", reference=1.0, margin=0.1)
    quad = ablation.loglog_slope(x, 2e-5 * x**2, expect="greater", reference=1.5)
    assert lin.mean == pytest.approx(1.0, abs=1e-9) and quad.mean == pytest.approx(2.0, abs=1e-9)
    assert lin.high - lin.low < 1e-6 and lin.verdict == HOLDS and quad.verdict == HOLDS and lin.n == 5
    # the slope of a ratio is the difference of the exponents
    diff = ablation.loglog_slope(x, (2e-5 * x**2) / (0.003 * x), expect="equal", reference=1.0, margin=0.2)
    assert diff.mean == pytest.approx(1.0, abs=1e-9) and diff.verdict == HOLDS

    noise = np.exp(np.random.default_rng(0).normal(scale=0.05, size=(5, 4)))
    y = (0.003 * x)[:, None] * noise  # 4 repeats per position, slope 1
    c = ablation.loglog_slope(x, y, expect="not greater", reference=1.0, margin=0.1)
    xs, ys = np.repeat(np.log(x), 4), np.log(y).ravel()
    slope, intercept = np.polyfit(xs, ys, 1)
    resid = ys - intercept - slope * xs
    half = 1.734064 * np.sqrt(resid @ resid / 18 / np.sum((xs - xs.mean()) ** 2))  # t_{0.95, 18}: 90% level
    np.testing.assert_allclose([c.mean, c.low, c.high], [slope, slope - half, slope + half], rtol=1e-6)
    assert c.low < 1.0 < c.high and c.n == 20


def test_loglog_slope_refuses_non_positive_values_and_one_position():
    with pytest.raises(ValueError, match="positive"):
        ablation.loglog_slope([1.0, 2.0, 4.0], [1.0, 0.0, 2.0], expect="greater")
    with pytest.raises(ValueError, match="two distinct x"):
        ablation.linear_fit([2.0, 2.0], [1.0, 3.0])
    slope, low, high, df = ablation.linear_fit([1.0, 2.0], [1.0, 3.0])
    assert (slope, low, high, df) == (2.0, -math.inf, math.inf, 0)  # two points: no interval


def test_comparison_record_and_text():
    c = ablation.paired([1.2, 1.3, 1.25], [1.0, 1.1, 1.0], expect="not greater", margin=0.5)
    record = c.as_dict()
    assert record["n"] == 3 and record["margin"] == 0.5 and record["verdict"] == c.verdict == HOLDS
    assert record["low"] < record["mean"] < record["high"] and record["samples"] == pytest.approx([0.2, 0.2, 0.25])
    assert c.text() == f"+{c.mean:.3f} [+{c.low:.3f}, +{c.high:.3f}] (90% paired t, n=3; claim: below 0 +- 0.5)"
    tiny = ablation.paired([1e-7, 2e-7, 1.5e-7], expect="less", reference=1e-4)  # too small for 3 decimals
    assert tiny.text().startswith("+1.50e-07 [") and "claim: < 0.0001" in tiny.text()


def test_unmeasured_part_is_inconclusive():
    c = ablation.Comparison.unmeasured("greater", "no tokens/s logged")
    assert (c.n, c.verdict) == (0, UNSURE) and "not measured: no tokens/s logged" in c.text()
    assert c.as_dict()["low"] is None and c.as_dict()["mean"] is None and c.as_dict()["verdict"] == UNSURE
    assert ablation.row("c", "m", c, ablation.paired([2.0, 2.1], [1.0, 1.0], expect="greater"))[2] == UNSURE


def test_bleu_of_summed_sentence_stats_is_the_corpus_bleu():
    from transformer_jax.eval.bleu import corpus_bleu

    hyps = ["the cat sat on the mat", "a dog runs", "hello world again and again", "x y z", ""]
    refs = ["the cat is on the mat", "the dog runs fast", "hello world again", "x y", "nothing here"]
    rows = ablation.bleu_stats(hyps, refs)
    assert rows.shape == (5, 10) and rows[0, 8] == 6 and rows[0, 9] == 6
    assert ablation.bleu_of_stats(rows) == pytest.approx(corpus_bleu(hyps, refs)["bleu"], abs=1e-9)
    assert ablation.bleu_of_stats(rows[[0, 0, 2]]) == pytest.approx(
        corpus_bleu([hyps[0], hyps[0], hyps[2]], [refs[0], refs[0], refs[2]])["bleu"], abs=1e-9
    )
    with pytest.raises(ValueError, match="one per reference"):
        ablation.bleu_stats(hyps, refs[:2])


def test_the_decode_benchmark_reports_the_same_slopes():
    from transformer_jax.benchmarks.decode import loglog_slopes

    positions = [16, 32, 64, 128]
    times = {"cached_sized_ms": {p: 0.01 * p for p in positions}, "recompute_ms": {p: 1e-4 * p**2 for p in positions}}
    slopes = loglog_slopes(times)
    assert slopes == {"cached_sized": pytest.approx(1.0), "recompute": pytest.approx(2.0)}
    c = ablation.loglog_slope(positions, list(times["recompute_ms"].values()), expect="greater", reference=1.5)
    assert c.mean == pytest.approx(slopes["recompute"])
