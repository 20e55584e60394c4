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
