"""norm_training's trained arms (`ablation.norm_trained`): names that keep the committed runs'
keys, configs that change only what the arm names, and the warmup scan's pick."""

import dataclasses

import pytest

from transformer_jax.ablation import norm_trained
from transformer_jax.ablation.runs import Curves, shakespeare_config
from transformer_jax.train.optim import Adam, Sgd


@pytest.fixture
def arms():
    return norm_trained.Arms(shakespeare_config("t", steps=10), "t", warmup=100)


def test_names_keep_the_committed_form(arms):
    assert arms.name("post", 18) == "post L18 adam warmup"
    assert arms.name("post", 18, warmup=0) == "post L18 adam no warmup"
    assert arms.name("pre", 6, "sgd", warmup=500) == "pre L6 sgd warmup 500"


def test_config_changes_placement_depth_optimizer_lr_and_warmup_only(arms):
    cfg = arms.config("post", 18, lr=3e-4, warmup=500)
    optim = cfg.train.optim
    assert (cfg.model.placement, cfg.model.dims.n_layers) == ("post", 18)
    assert (optim.lr, optim.warmup_steps, optim.grad_clip) == (3e-4, 500, None)
    assert isinstance(optim.optimizer, Adam)
    assert arms.config("pre", 6, lr=0.1).train.optim.warmup_steps == 100
    assert arms.config("pre", 6, lr=0.1, warmup=0).train.optim.warmup_steps == 0
    sgd = arms.config("pre", 6, lr=0.1, optimizer="sgd").train.optim.optimizer
    assert isinstance(sgd, Sgd) and sgd.momentum == 0.9
    assert dataclasses.replace(cfg, model=arms.base.model, train=arms.base.train) == arms.base


def test_warmup_scan_picks_the_best_cell_that_trains(arms, monkeypatch):
    loss = {(1e-4, 100): 3.0, (1e-4, 500): 2.6, (3e-4, 100): 3.3, (3e-4, 500): 2.3, (1e-3, 500): float("inf")}
    monkeypatch.setattr(
        norm_trained.Arms, "dev_loss", lambda self, p, d, *, lr, warmup=None, seed=0: loss.get((lr, warmup), 3.3)
    )
    scan = norm_trained.warmup_scan(arms, 18, (1e-4, 3e-4, 1e-3), (100, 500), floor=3.3, margin=0.5)
    assert [c["trains"] for c in scan["cells"]] == [False, True, False, True, False, False]
    assert (scan["pick"]["lr"], scan["pick"]["warmup"]) == (3e-4, 500)
    loss.clear()
    assert norm_trained.warmup_scan(arms, 18, (1e-4,), (100,), floor=3.3, margin=0.5)["pick"] is None


def test_steps_change_the_length_and_the_name_only(arms):
    cfg = arms.config("pre", 6, lr=1e-3, steps=50)
    assert cfg.train.steps == 50 and cfg.train.checkpoint.every == 50
    assert arms.name("pre", 6, steps=50) == "pre L6 adam warmup 50 steps"
    assert arms.config("pre", 6, lr=1e-3) == arms.config("pre", 6, lr=1e-3, steps=None)
    # the base's own length is the base arm: the same config and name, so the same run key (reused)
    assert arms.config("pre", 6, lr=1e-3, steps=10) == arms.config("pre", 6, lr=1e-3)
    assert arms.name("pre", 6, steps=10) == arms.name("pre", 6) == "pre L6 adam warmup"


def test_plateau_is_the_first_length_whose_last_fifth_gains_little():
    steps = list(range(200, 5001, 200))
    loss = [2.0 + 10 / s**0.5 for s in steps]  # the last fifth gains 0.037 at 1000, 0.026 at 2000, 0.021, 0.019
    assert norm_trained.plateau_steps(steps, loss, (1000, 2000, 3000, 4000, 5000), gain=0.02) == 4000
    assert norm_trained.plateau_steps(steps, loss, (1000, 5000), gain=0.001) == 5000  # never: the longest


def test_tuned_picks_the_warmup_whose_best_rate_is_lowest(arms, monkeypatch):
    seen = []

    def sweep(cfg, name, grid, notebook, *, seeds):
        seen.append((name, cfg.train.optim.warmup_steps, tuple(seeds)))
        best = {"pre L18 sgd warmup": 2.5, "pre L18 sgd warmup 500": 2.4}[name]
        return {"grid": list(grid), "dev_loss": [best + 0.1, best], "lr": grid[1], "at_edge": True}

    monkeypatch.setattr(norm_trained, "sweep_lr", sweep)
    t = norm_trained.tuned(arms, "pre", 18, [0.1, 0.3], (None, 500), optimizer="sgd", seeds=(0, 1, 2))
    assert (t["lr"], t["warmup"], t["dev_loss"]) == (0.3, 500, 2.4)
    assert seen == [("pre L18 sgd warmup", 100, (0, 1, 2)), ("pre L18 sgd warmup 500", 500, (0, 1, 2))]


def test_the_scan_goes_shallower_until_a_cell_trains(arms, monkeypatch):
    seen = []

    def dev_loss(self, p, depth, *, lr, warmup=None, seed=0):
        seen.append(depth)
        return 2.5 if (depth, lr, warmup) == (12, 3e-4, 500) else 3.3

    monkeypatch.setattr(norm_trained.Arms, "dev_loss", dev_loss)
    out = norm_trained.deepest_training_scan(arms, (18, 12, 9), (1e-4, 3e-4), (100, 500), floor=3.3, margin=0.5)
    assert (out["depth"], out["pick"]["lr"], out["pick"]["warmup"]) == (12, 3e-4, 500)
    assert sorted(out["scans"]) == [12, 18] and seen == [18] * 4 + [12] * 4
    none = norm_trained.deepest_training_scan(arms, (18,), (1e-4,), (100,), floor=3.3, margin=0.5)
    assert none["depth"] is None and none["pick"] is None and list(none["scans"]) == [18]


def test_best_to_plateau_tunes_each_placement_at_the_plateau_length(arms, monkeypatch):
    picks = {"post L6 adam warmup": 3e-3, "pre L6 adam warmup": 9e-3}
    sweep = lambda cfg, name, grid, notebook: {"lr": picks[name], "grid": list(grid)}
    steps = list(range(200, 5001, 200))
    curve = Curves("p", [], [], steps, [2.0 + 10 / s**0.5 for s in steps], {}, "")
    runs, tunes = [], []
    monkeypatch.setattr(norm_trained, "sweep_lr", sweep)
    monkeypatch.setattr(norm_trained, "plateau_run", lambda *a: runs.append(a[1:]) or curve)
    monkeypatch.setattr(norm_trained, "tuned", lambda a, p, d, grid, w, steps: tunes.append((p, grid, steps)) or {})
    out = norm_trained.best_to_plateau(arms, ("post", "pre"), 6, [1e-3, 3e-3], (100, 500), (1000, 3000, 5000), 200)
    assert runs == [("pre", 6, 9e-3, 5000, 200)] and out["steps"] == 5000  # 3000 still gains 0.021
    assert [(p, round(g[1], 6), s) for p, g, s in tunes] == [("post", 3e-3, 5000), ("pre", 9e-3, 5000)]
