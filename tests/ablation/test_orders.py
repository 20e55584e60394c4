"""The order-blind reference of a seq2seq task (`ablation.orders`): the loss of the best predictor
that sees the source as a multiset, checked against that predictor run token by token."""

import collections
import itertools
import math

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation import orders
from transformer_jax.data import build_data
from transformer_jax.data.sources import load_corpus


def bayes_order_blind_nats(target: list[int]) -> float:
    """The loss of predicting each next symbol from the counts not yet emitted, then EOS (certain)."""
    left, nats = collections.Counter(target), 0.0
    for i, y in enumerate(target):
        nats -= math.log(left[y] / (len(target) - i))
        left[y] -= 1
    return nats


@pytest.mark.parametrize("source", [[3, 1, 2], [5, 5, 2, 7, 5, 2], [4] * 5, list(range(9))])
def test_the_reference_is_the_best_order_blind_loss_on_every_ordering(source):
    for target in itertools.islice(itertools.permutations(source), 50):
        assert bayes_order_blind_nats(list(target)) == pytest.approx(orders.orderings_nats(source))
    assert math.exp(orders.orderings_nats(source)) == pytest.approx(len(set(itertools.permutations(source))))


def test_distinct_symbols_give_log_factorial_per_token_and_eos_counts_as_a_token():
    assert orders.order_blind_loss([list(range(6))]) == pytest.approx(math.log(720) / 7)
    assert orders.order_blind_loss([list(range(6))], extra=0) == pytest.approx(math.log(720) / 6)
    # token-weighted over examples, as the loss is: sums, not a mean of ratios
    assert orders.order_blind_loss([[1, 2], [1, 2, 3, 4]]) == pytest.approx((math.log(2) + math.log(24)) / 8)
    with pytest.raises(ValueError, match="at least one example"):
        orders.order_blind_loss([])


def test_a_splits_reference_follows_its_seed(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    cfg = ablation.reorder_config("reverse", "none", steps=3)
    refs = [ablation.split_order_blind_loss(cfg, s) for s in (0, 0, 1)]
    assert refs[0] == refs[1] != refs[2]
    # 4 to 12 symbols out of 32: below log(12!)/13, the all-distinct longest source
    assert 0.3 < refs[0] < math.log(math.factorial(12)) / 13
    rng = np.random.default_rng(0)
    assert ablation.order_blind_loss([rng.permutation(8)]) == pytest.approx(math.log(40320) / 9)


@pytest.mark.parametrize("task", ["reverse", "sort"])
def test_the_scored_tokens_are_those_the_reference_divides_by(monkeypatch, task):
    """The val loss is weighted over L + 1 tokens per target (the symbols and EOS, never BOS or
    padding, nothing truncated), the denominator of `order_blind_loss`; and each target reorders
    its source, the premise of the reference."""
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    cfg = ablation.protocol.with_seed(ablation.reorder_config(task, "none", steps=3), 0)
    data = build_data(cfg.data, batch_size=4)
    examples = data.pipeline.examples("val")
    weights = data.pipeline.rows("val")["weights"]
    assert weights.sum() == sum(len(examples[i][0]) + 1 for i in range(len(examples)))
    for i in range(len(examples)):
        source, target = examples[i]
        assert sorted(source) == sorted(target) and len(source) >= 4


def bag_nats(source: list[int], target: list[int]) -> float:
    """The loss of predicting every target symbol from the source's counts, never updated."""
    counts = collections.Counter(source)
    return -sum(math.log(counts[y] / len(source)) for y in target)


@pytest.mark.parametrize("source", [[3, 1, 2], [5, 5, 2, 7, 5, 2], [4] * 5, list(range(9))])
def test_the_source_bag_reference_is_the_count_predictor_and_never_below_the_order_blind_one(source):
    target = source[::-1]
    assert orders.source_bag_nats(source) == pytest.approx(bag_nats(source, target))
    assert orders.source_bag_nats(source) >= orders.orderings_nats(source) - 1e-12
    assert orders.source_bag_loss([list(range(6))]) == pytest.approx(6 * math.log(6) / 7)
    assert orders.source_bag_loss([[4] * 5]) == 0.0  # one symbol: the counts say everything


def test_the_source_bag_reference_of_a_split_is_about_one_and_a_half_order_blind_ones(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    cfg = ablation.reorder_config("reverse", "none", steps=3)
    ratio = ablation.split_order_blind_loss(cfg, 0, reference=ablation.source_bag_loss) / (
        ablation.split_order_blind_loss(cfg, 0)
    )
    assert 1.3 < ratio < 1.8


def test_each_runs_ratio_is_its_loss_over_its_splits_reference_and_a_diverged_run_scores_log_vocab():
    run = lambda val, train=1.0: ablation.Curves("r", [1], [train], [1], [val], {}, "/nowhere")
    ratio, record = orders._ratios([run(2.0), run(0.5, train=float("nan"))], [1.0, 1.25], [3, 4])
    assert ratio == pytest.approx([2.0, math.log(orders.VOCAB) / 1.25])
    assert record["n"] == 2 and [r["seed"] for r in record["seeds"]] == [3, 4]
    assert record["seeds"][1] == {"seed": 4, "val loss": math.log(32), "order-blind loss": 1.25, "ratio": ratio[1]}
    assert record["mean"]["ratio"] == pytest.approx(np.mean(ratio))


def _reordering() -> orders.Reordering:
    curve = lambda val: ablation.Curves("run", [0], [3.0], [0, 10], val, {}, "/nowhere")
    curves = {"rev s0": curve([2.4, 2.2]), "sort s0": curve([1.0, 0.1]), "rev s3": curve([2.3, 2.1])}
    sweeps = {"rev": {"lr": 3e-3}, "sort": {"lr": 0.009}}
    ratio = {"rev": [1.1, 1.2, 1.3], "sort": [0.05, 0.05, 0.05]}
    return orders.Reordering([2.0], ratio, {}, sweeps, {}, curves, [2.0], {"rev": [1.2, 1.2, 1.2]}, [1.5, 1.5, 1.5])


def test_the_summary_gives_each_arms_rate_and_ratio_then_the_fresh_seeds():
    lines = orders.summary(_reordering(), (3, 4, 5)).splitlines()
    assert lines[0].startswith("rev: lr 0.003; loss / order-blind loss 1.2") and lines[1].startswith("sort: lr 0.009;")
    assert lines[2].startswith("rev, fresh seeds (3, 4, 5): loss / order-blind loss 1.2")
    assert lines[3].startswith("source-bag loss / order-blind loss, fresh seeds: 1.5") and len(lines) == 4


def test_the_figure_draws_each_arms_validation_ratio_on_the_seed_asked():
    import matplotlib

    matplotlib.use("Agg")
    fig = orders.figure(_reordering(), ["rev", "sort"], 0)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines[:2]] == ["rev", "sort"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.2, 1.1])
    assert [line.get_ydata()[0] for line in ax.lines[2:]] == [1.0, 1.5]  # chance, then the source bag


@pytest.mark.parametrize("seed", [0, 3, ablation.DEV_SEED])
def test_reversal_and_sort_draw_the_same_sources_from_a_seed(monkeypatch, seed):
    """`run_reordering` divides every arm's loss by the order-blind loss of the *reversal*'s sources
    (one reference per seed): the sort arms' runs must see those very sources, whatever the
    encoding, in the scored split (its FULL size) and the training one alike; another seed draws others."""
    monkeypatch.delenv(ablation.SMOKE_ENV, raising=False)

    def examples(task, position, which, seed=seed, count=2000):
        cfg = ablation.protocol.with_seed(ablation.reorder_config(task, position, steps=3), seed)
        split = load_corpus(cfg.data).split(which)
        return [split[i] for i in range(min(count, len(split)))]

    for which in ("val", "train"):
        reverse = examples("reverse", "none", which)
        sources = [source for source, _ in reverse]
        assert which == "train" or len(reverse) == 500
        assert all(target == source[::-1] for source, target in reverse)
        for position in ("none", "rope"):
            sort = examples("sort", position, which)
            assert [source for source, _ in sort] == sources, (which, position)
            assert all(target == sorted(source) for source, target in sort)
        assert [source for source, _ in examples("sort", "none", which, seed + 1)] != sources
    cfg = {task: ablation.reorder_config(task, "none", steps=3) for task in ("reverse", "sort")}
    assert ablation.split_order_blind_loss(cfg["sort"], seed) == ablation.split_order_blind_loss(cfg["reverse"], seed)
