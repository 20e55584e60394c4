"""The periodic actions' settings (``train.eval``, ``train.log`` with ``train.log.wandb``,
``train.checkpoint`` with ``train.checkpoint.best``, ``train.sample``, ``train.nonfinite``): every
field of every group and of every non-finite policy is read by the code that consumes it (issue
43), a policy's field exists only under that policy, and old flat keys name their new place."""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from typing import Any

import jax
import pytest

from tests.variant_reads import recorded_reads, unread_fields
from transformer_jax.core import configlib, migration
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.train import actions, loggers
from transformer_jax.train.action_config import (
    BestCheckpoint,
    CheckpointConfig,
    EvalConfig,
    LogConfig,
    NonfiniteConfig,
    SampleConfig,
    SkipNonfinite,
)
from transformer_jax.train.config import Config, LossConfig, TrainConfig
from transformer_jax.train.experiment import config_from_dict, load_experiment
from transformer_jax.train.loggers import WandbConfig
from transformer_jax.train.loop import train
from transformer_jax.train.step_view import StepView

TINY = os.path.join(os.path.dirname(__file__), "tiny_experiment.py")


class _FakeWandb(types.ModuleType):
    """A ``wandb`` that records ``init``'s keywords and the logged rows, with no network."""

    def __init__(self):
        super().__init__("wandb")
        self.inits: list[dict] = []
        self.rows: list[dict] = []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return types.SimpleNamespace(log=lambda values, step: self.rows.append(values), finish=lambda: None)


def test_every_field_of_the_action_and_loss_groups_is_read_by_a_training_run(tmp_path, monkeypatch):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr(loggers, "_installed", lambda module: True)
    cfg = load_experiment(TINY)
    settings = TrainConfig(
        steps=2,
        batch_size=4,
        optim=cfg.train.optim,
        eval=EvalConfig(every=1, batches=1, extra=True),
        log=LogConfig(every=1, loggers=("jsonl",), wandb=WandbConfig(project="unit", entity="team"), peak_flops=1e12),
        checkpoint=CheckpointConfig(every=1, keep=1, best=BestCheckpoint(metric="loss", mode="min")),
        sample=SampleConfig(every=1, tokens=2, prompt="a"),
        loss=LossConfig(label_smoothing=0.1, z_loss=1e-4),
    )
    cfg = dataclasses.replace(cfg, train=settings)
    groups = [EvalConfig, LogConfig, WandbConfig, CheckpointConfig, BestCheckpoint, SampleConfig, LossConfig]
    with recorded_reads(groups) as reads:
        summary = train(cfg, str(tmp_path / "run"), devices=jax.devices()[:1])
    assert summary["step"] == 2 and fake.inits[0]["project"] == "unit" and fake.inits[0]["entity"] == "team"
    assert fake.rows and (tmp_path / "run" / "best").is_dir()
    unread = [f"{c.PATH}.{f.name}" for c in groups for f in dataclasses.fields(c) if (c, f.name) not in reads]
    assert unread == []


def _nonfinite_record() -> dict:
    sums = {"loss_sum": float("nan"), "objective_sum": 0.0, "correct_sum": 0.0, "weight_sum": 8.0}
    return {**sums, "finite": False, "nonfinite_grads": {"w": True}, "skips": 1}


@pytest.mark.parametrize("kind", NonfiniteConfig.VARIANTS.names())
def test_every_nonfinite_policy_reads_each_of_its_fields(kind, monkeypatch):
    """The consumer is the log action that sees each step's finiteness: a non-finite step goes
    through it under each policy (``skip`` with room for more skips, ``halt`` stopping)."""
    monkeypatch.setattr(actions.jax, "device_get", lambda x: x)
    monkeypatch.setattr(actions.jax, "block_until_ready", lambda x: x)
    policy = NonfiniteConfig.VARIANTS.get(kind)()
    log = actions.Log(LogConfig(every=1), policy, steps=4, flops_per_token=1.0, peak_flops=None, start_step=0)
    ctl: Any = types.SimpleNamespace(action_seconds=0.0, write=lambda step, m: None, progress=lambda step, **s: None)

    def consume():
        log.after_step(ctl, StepView(1, types.SimpleNamespace(step=1), _nonfinite_record(), tokens=8))
        try:
            log.run(ctl, StepView(1, None))
        except actions.NonFiniteError:
            assert kind == "halt"

    assert unread_fields(consume, policy) == []


def test_a_policys_field_does_not_exist_under_another_policy():
    with pytest.raises(ConfigError) as err:
        load_experiment(TINY, ["train.nonfinite=halt", "train.nonfinite.max_consecutive=3"])
    message = str(err.value)
    assert "the non-finite policy 'halt' has no setting 'max_consecutive' (its settings: none)" in message
    assert "--set train.nonfinite=skip" in message
    cfg = load_experiment(TINY, ["train.nonfinite.max_consecutive=3"])
    assert cfg.train.nonfinite == SkipNonfinite(max_consecutive=3)


def test_no_best_checkpoint_is_a_none_group():
    cfg = apply_overrides(Config(), ["train.checkpoint.best=none"])
    assert cfg.train.checkpoint.best is None
    with pytest.raises(ConfigError, match=r"train.checkpoint.best is None \(off\)"):
        apply_overrides(cfg, ["train.checkpoint.best.metric=bleu"])
    cfg = apply_overrides(Config(), ["train.checkpoint.best.metric=bleu", "train.checkpoint.best.mode=max"])
    assert cfg.train.checkpoint.best == BestCheckpoint(metric="bleu", mode="max")


@pytest.mark.parametrize(
    "old,new",
    [
        ("train.eval_every=5", "train.eval.every"),
        ("train.eval_batches=2", "train.eval.batches"),
        ("train.log_every=1", "train.log.every"),
        ("train.checkpoint_every=2", "train.checkpoint.every"),
        ("train.best_metric=bleu", "train.checkpoint.best.metric"),
        ("train.keep_best=false", r"train.checkpoint.best \(none: no best checkpoint\)"),
        ("train.sample_tokens=0", "train.sample.tokens"),
        ("train.max_consecutive_skips=3", r"train.nonfinite.max_consecutive \(with train.nonfinite=skip\)"),
        ("train.wandb_project=x", r"train.log.wandb.project \(with train.log.wandb=on\)"),
        ("train.loggers=jsonl", "train.log.loggers"),
    ],
)
def test_an_old_train_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new}"):
        apply_overrides(Config(), [old])


def test_an_old_flat_train_section_loads_into_the_groups_and_maps_back():
    old = configlib.to_dict(Config())
    flat = migration.legacy(old)["train"]
    flat.update(eval_every=7, keep_best=False, nonfinite="halt", loggers=["wandb"], wandb_entity="team")
    cfg = config_from_dict({"train": flat})
    t = cfg.train
    assert (t.eval.every, t.checkpoint.best, t.nonfinite.kind) == (7, None, "halt")
    assert t.log.loggers == () and t.log.wandb == WandbConfig(entity="team")
    back = migration.legacy(configlib.to_dict(cfg))["train"]
    assert {k: back[k] for k in flat} == {**flat, "best_metric": "loss", "best_mode": "min"}
