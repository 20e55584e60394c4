"""norm_placement's trained arms (`ablation.norm_trained`): names that keep the committed runs'
keys, configs that change only what the arm names, and the warmup scan's pick."""

import dataclasses

import pytest

from transformer_jax.ablation import norm_trained
from transformer_jax.ablation.runs import shakespeare_config
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
