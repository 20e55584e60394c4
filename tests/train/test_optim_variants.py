"""Every optimizer and schedule settings class (each entry of `OptimizerConfig.VARIANTS` and
`ScheduleConfig.VARIANTS`, so a new one is covered without being listed) has no field that building
and using it leaves unread (issue 43); a field of another choice cannot be set, on the command line
or from a saved config."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from tests.variant_reads import unread_fields
from transformer_jax.core import configlib, migration
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import get_preset
from transformer_jax.train.config import Config
from transformer_jax.train.optim import (
    OPTIMIZERS,
    SCHEDULES,
    Adam,
    AdamW,
    CosineSchedule,
    InverseSqrtSchedule,
    LinearSchedule,
    Muon,
    OptimConfig,
    OptimizerConfig,
    ScheduleConfig,
    Sgd,
    make_optimizer,
    make_schedule,
)
from transformer_jax.train.state import model_graph, model_infos

# Settings a choice cannot be built without (everything else at its defaults).
NEEDED: dict[str, dict[str, Any]] = {"inverse_sqrt": {"d_model": 32}}


@pytest.fixture(scope="module")
def tiny():
    """A tiny model's parameters, gradients and parameter roles."""
    cfg = get_preset("llama_tiny", d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=1, vocab_size=64)
    shapes = nnx.to_pure_dict(model_graph(cfg)[1])
    params = jax.tree.map(lambda x: jax.random.normal(jax.random.key(x.ndim), x.shape, x.dtype), shapes)
    grads = jax.tree.map(lambda x: jnp.cos(x) + 0.1, params)
    return params, grads, model_infos(cfg)


def _one_update(cfg: OptimConfig, tiny) -> Any:
    params, grads, infos = tiny
    tx, schedule = make_optimizer(cfg, 10, infos=infos)
    updates, _ = tx.update(grads, tx.init(params), params)
    assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))
    return updates, schedule(jnp.arange(4))


@pytest.mark.parametrize("kind", OptimizerConfig.VARIANTS.names())
def test_every_optimizer_reads_each_of_its_fields(kind, tiny):
    settings = OptimizerConfig.VARIANTS.get(kind)(**NEEDED.get(kind, {}))
    cfg = OptimConfig(optimizer=settings, schedule="constant", warmup_steps=2)
    assert unread_fields(lambda: _one_update(cfg, tiny), settings) == []


@pytest.mark.parametrize("kind", ScheduleConfig.VARIANTS.names())
def test_every_schedule_reads_each_of_its_fields(kind, tiny):
    settings = ScheduleConfig.VARIANTS.get(kind)(**NEEDED.get(kind, {}))
    cfg = OptimConfig(schedule=settings, warmup_steps=2, lr=1e-3)

    def consume():
        rates = make_schedule(cfg, 8)(jnp.arange(10))
        assert bool(jnp.all(jnp.isfinite(rates))) and float(rates.max()) > 0
        return _one_update(cfg, tiny)

    assert unread_fields(consume, settings) == []
    assert unread_fields(consume, cfg) == []  # lr, warmup_steps, grad_clip: read whatever is chosen


def test_every_choice_has_a_builder():
    assert OPTIMIZERS.names() == OptimizerConfig.VARIANTS.names()
    assert SCHEDULES.names() == ScheduleConfig.VARIANTS.names()


def test_a_name_stands_for_the_choices_defaults():
    cfg = OptimConfig(optimizer="sgd", schedule="inverse_sqrt")
    assert cfg.optimizer == Sgd() and cfg.schedule == InverseSqrtSchedule()


@pytest.mark.parametrize(
    "sets, message",
    [
        (["train.optim.optimizer.momentum=0.5"],
         r"the optimizer 'adamw' has no setting 'momentum' \(its settings: b1, b2, eps, weight_decay, "
         r"decay_exclude\); 'momentum' is a setting of 'sgd', 'muon'"),
        (["train.optim.schedule=constant", "train.optim.schedule.min_lr=0"],
         r"the schedule 'constant' has no setting 'min_lr' \(its settings: none\)"),
        (["train.optim.optimizer=adam", "train.optim.optimizer.weight_decay=0"],
         r"the optimizer 'adam' has no setting 'weight_decay'"),
    ],
)  # fmt: skip
def test_a_field_the_choice_does_not_have_is_an_error_naming_its_fields(sets, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Config(), sets)


def test_set_chooses_and_sets_the_nested_settings():
    cfg = apply_overrides(Config(), ["train.optim.optimizer=muon", "train.optim.optimizer.ns_steps=3",
                                     "train.optim.schedule.decay_steps=500"])  # fmt: skip
    assert cfg.train.optim.optimizer == Muon(ns_steps=3)
    assert cfg.train.optim.schedule == CosineSchedule(decay_steps=500)


@pytest.mark.parametrize(
    "old, new",
    [
        ("train.optim.momentum=0.5", "train.optim.optimizer.momentum (with train.optim.optimizer=sgd)"),
        ("train.optim.muon_ns_steps=3", "train.optim.optimizer.ns_steps (with train.optim.optimizer=muon)"),
        ("train.optim.weight_decay=0", "train.optim.optimizer.weight_decay"),
        ("train.optim.min_lr=0", "train.optim.schedule.min_lr"),
        ("train.optim.decay_steps=9", "train.optim.schedule.decay_steps"),
        ("train.optim.d_model=64", "train.optim.schedule.d_model (with train.optim.schedule=inverse_sqrt)"),
    ],
)
def test_an_old_set_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=re.escape(f"'{old.split('=')[0]}' was renamed: {new}")):
        apply_overrides(Config(), [old])


def _flat(**changes: Any) -> dict[str, Any]:
    """An optim section in the layout of the committed runs."""
    saved = migration.legacy({"train": {"optim": configlib.to_dict(OptimConfig())}})["train"]["optim"]
    return {**saved, **changes}


@pytest.mark.parametrize(
    "flat, want",
    [
        (_flat(), OptimConfig()),
        (_flat(optimizer="sgd", weight_decay=0.0, nesterov=True, lr=0.3, min_lr=0.03),
         OptimConfig(Sgd(nesterov=True, weight_decay=0.0), lr=0.3, schedule=CosineSchedule(min_lr=0.03))),
        (_flat(optimizer="muon", muon_ns_steps=3, adam_lr=3e-3, b2=0.95, schedule="linear", min_lr=0.0),
         OptimConfig(Muon(ns_steps=3, adam_lr=3e-3, b2=0.95), schedule=LinearSchedule(min_lr=0.0))),
        (_flat(optimizer="adam", schedule="inverse_sqrt", d_model=64, lr=0.7),
         OptimConfig(Adam(), lr=0.7, schedule=InverseSqrtSchedule(d_model=64))),
        (_flat(decay_exclude=["bias"]), OptimConfig(AdamW(decay_exclude=("bias",)))),
    ],
)  # fmt: skip
def test_old_flat_fields_become_the_choices_settings_and_map_back(flat, want):
    run = {"train": {"optim": flat}}
    upgraded = migration.upgrade(run)["train"]["optim"]
    assert configlib.from_dict(OptimConfig, upgraded) == want
    assert migration.legacy({"train": {"optim": configlib.to_dict(want)}})["train"]["optim"] == flat
