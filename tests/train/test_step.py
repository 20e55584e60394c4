"""The train step: gradient accumulation equals one big batch, non-finite updates are dropped,
the wall-clock budget ends a run cleanly; all in-process on one device."""

import dataclasses
import os

import jax
import numpy as np
import pytest

from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.loop import train
from transformer_jax.train.run import setup
from transformer_jax.train.step import make_train_step

EXPERIMENT = os.path.join(os.path.dirname(__file__), "tiny_experiment.py")
ONE = jax.devices()[:1]


def _cfg(*sets):
    return apply_overrides(load_experiment(EXPERIMENT), list(sets))


def _one_step(tmp_path, name, *sets, poison=False):
    """(state before, state after, metrics) of one train step; ``poison`` puts a NaN in a weight."""
    run, _ = setup(_cfg(*sets), str(tmp_path / name), devices=ONE)
    step = jax.jit(
        make_train_step(
            run.graphdef,
            run.tx,
            FORWARDS.get("lm"),
            run.cfg.train,
            run.schedule,
        )
    )
    state = run.state
    if poison:
        params = jax.tree.map(lambda x: x, state.params)
        kernel = params["layers"]["layers"][0]["ffn"]["w_in"]["kernel"]
        params["layers"]["layers"][0]["ffn"]["w_in"]["kernel"] = kernel.at[0, 0].set(np.nan)
        state = dataclasses.replace(state, params=params)
    before = jax.device_get(state)
    batch = run.put_batch(next(run.data.train_iterator()))
    after, metrics = step(state, batch, jax.random.key(0))
    run.checkpoints.close()
    return before, jax.device_get(after), jax.device_get(metrics)


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    _, one, m1 = _one_step(tmp_path, "a", "train.grad_accum=1", "train.optim.warmup_steps=0")
    _, four, m4 = _one_step(tmp_path, "b", "train.grad_accum=4", "train.optim.warmup_steps=0")
    assert float(m1["weight_sum"]) == float(m4["weight_sum"]) > 0
    np.testing.assert_allclose(m1["loss_sum"], m4["loss_sum"], rtol=1e-5)
    np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-4)
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(four.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", ["overflowing_update", "nan_weight"])
def test_non_finite_update_is_dropped_and_counted(tmp_path, case):
    sets = ["train.optim.warmup_steps=0"]
    if case == "overflowing_update":
        sets += ["train.optim.lr=1e300", "train.optim.grad_clip=None", "train.optim.schedule.min_lr=0"]
    before, after, metrics = _one_step(tmp_path, case, *sets, poison=case == "nan_weight")
    assert not bool(metrics["finite"])
    assert int(after.skips) == 1 and int(after.total_skips) == 1 and int(after.step) == 1
    for a, b in zip(
        jax.tree.leaves((before.params, before.opt_state)), jax.tree.leaves((after.params, after.opt_state))
    ):
        np.testing.assert_array_equal(a, b)
    if case == "nan_weight":
        bad = [
            jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_flatten_with_path(metrics["nonfinite_grads"])[0] if v
        ]
        assert any("ffn" in b for b in bad), bad


def test_finite_step_updates_and_resets_skips(tmp_path):
    before, after, metrics = _one_step(tmp_path, "ok", "train.optim.warmup_steps=0")
    assert bool(metrics["finite"]) and int(after.skips) == 0
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before.params), jax.tree.leaves(after.params)))


def test_max_minutes_ends_the_run_with_eval_and_checkpoint(tmp_path):
    cfg = _cfg("train.steps=100000", "train.max_minutes=0.05", "train.eval.every=100000")
    summary = train(cfg, str(tmp_path / "run"), devices=ONE)
    assert summary["stopped"] == "max_minutes"
    assert 0 < summary["step"] < 100000
    assert summary["val_loss"] is not None and np.isfinite(summary["val_loss"])
    assert os.path.isdir(tmp_path / "run" / "checkpoints" / str(summary["step"]))
