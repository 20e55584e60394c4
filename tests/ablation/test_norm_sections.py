"""norm_training's sections (`ablation.norm_sections`): the arms each one trains (the same calls the
notebook's loops made, so committed runs keep their keys), and the rows it judges."""

import math
import types

import numpy as np

from transformer_jax.ablation import VERDICTS, norm_trained
from transformer_jax.ablation import norm_sections as ns

HOLDS, FAILS, _ = VERDICTS


class FakeArms:
    """Records `norm_trained.Arms.train` / `dev_loss` calls; every run ends at ``loss``."""

    def __init__(self, loss=2.0, dev=None):
        self.calls, self.loss, self.dev = [], loss, dev or {}

    def train(self, placement, depth, seeds, **kw):
        self.calls.append((placement, depth, tuple(seeds), kw))
        return [types.SimpleNamespace(final_or=lambda ceiling: self.loss, diverged=False) for _ in seeds]

    def dev_loss(self, placement, depth, *, lr, warmup=None, seed=0):
        return self.dev.get(lr, 3.3)


def test_warmup_section_trains_the_pick_with_its_warmup_and_without_any():
    arms = FakeArms()
    lets = ns.with_and_without_warmup(arms, 12, {"lr": 1e-3, "warmup": 500}, (3, 4), math.log(68))
    assert lets == {"warmup": [2.0, 2.0], "no warmup": [2.0, 2.0]}
    assert [c[3] for c in arms.calls] == [{"lr": 1e-3, "warmup": 500}, {"lr": 1e-3, "warmup": 0}]
    assert ns.with_and_without_warmup(arms, 12, None, (3, 4), 4.2) == {"warmup": [], "no warmup": []}


def test_adam_vs_sgd_tunes_then_trains_each_arm_in_turn(monkeypatch):
    arms = FakeArms()
    monkeypatch.setattr(ns, "tuned", lambda a, p, d, grid, warmups, *, optimizer, seeds: {"lr": grid[1], "warmup": 500})
    out = ns.adam_vs_sgd(arms, 12, {"adam": 1e-3, "sgd": 0.1}, 500, (0, 1, 2), (3, 4, 5), 4.2)
    assert list(out) == [("post", "adam"), ("post", "sgd"), ("pre", "adam"), ("pre", "sgd")]
    assert arms.calls[1] == ("post", 12, (3, 4, 5), {"lr": 0.1, "optimizer": "sgd", "warmup": 500})


def test_rescue_runs_at_the_smallest_failing_lr_and_not_where_nothing_fails():
    arms = FakeArms(dev={1e-3: 2.2, 3e-3: 3.3, 1e-2: 4.0})
    rescue, runs = ns.deepnorm_rescue(arms, 18, (1e-3, 3e-3, 1e-2), floor=3.34, margin=0.5, seeds=(0, 1), ceiling=4.2)
    assert (rescue["lr"], rescue["post_fails_in_sweep"], list(runs)) == (3e-3, True, ["post", "deepnorm"])
    assert arms.calls[0][3] == {"lr": 3e-3}
    rescue, runs = ns.deepnorm_rescue(
        FakeArms(dev={1e-3: 2.2}), 18, (1e-3,), floor=3.34, margin=0.5, seeds=(0, 1), ceiling=4.2
    )
    assert (rescue["post_fails_in_sweep"], rescue["post"], runs) == (False, [], {})


def test_rows_go_either_way():
    line = {"floor": 3.3, "margin": 0.5}
    point = {"lr": 1e-3, "warmup": 500}
    fails = {"warmup": [2.2, 2.25, 2.3], "no warmup": [3.3, 3.32, 3.31]}
    parts = ns.warmup_lets_train(fails, point, 12, **line)[1]
    assert [p.verdict for p in parts] == [HOLDS, HOLDS]
    trains = {"warmup": [2.2, 2.25, 2.3], "no warmup": [2.1, 2.12, 2.15]}
    assert all(p.verdict == FAILS for p in ns.warmup_lets_train(trains, point, 12, **line)[1])
    assert ns.warmup_lets_train(fails, None, 12, **line)[1][0].method.startswith("not measured")
    layers = np.arange(1, 19)
    assert ns.change_falls({10: layers**-1.0, 11: layers**-0.9}, 18)[1][0].verdict == HOLDS
    assert ns.change_falls({10: layers**1.0, 11: layers**0.9}, 18)[1][0].verdict == FAILS


def test_sections_use_the_arms_of_norm_trained():
    assert ns.Arms is norm_trained.Arms and ns.tuned is norm_trained.tuned


def test_relative_changes_name_the_seeds_they_keep():
    """A diverged run has no trained checkpoint to probe: its seed leaves the record with it."""
    run = lambda r, diverged=False: types.SimpleNamespace(
        summary={"measured": {"relative_change": r}}, diverged=diverged
    )
    warm = {
        ("post", 2, True, 1e-3): [run([0.5, 0.4]), run([9.0, 9.0], diverged=True), run([0.3, 0.2])],
        ("pre", 2, True, 1e-3): [run([0.2, 0.1]), run([0.4, 0.3]), run([0.6, 0.5])],
    }
    rel = ns.relative_changes(warm, 2, 1e-3, (0, 1, 2))
    assert list(rel["post"]) == [0, 2] and list(rel["pre"]) == [0, 1, 2]
    np.testing.assert_allclose(rel["post"][2], [0.3, 0.2])
    record = ns.record(
        {},
        rel,
        {"depth": 12, "pick": None, "scans": {}},
        {"warmup": [], "no warmup": []},
        {},
        {},
        {},
        {},
        {"post": [], "deepnorm": []},
        {},
        (0, 1, 2),
        {"warmup": (), "versus": (), "optimizers": ()},
    )
    assert record["trained_relative_change"]["post"]["seeds"] == [0, 2]
    assert record["trained_relative_change"]["pre"]["seeds"] == [0, 1, 2]
