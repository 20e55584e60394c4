"""Settings of the optimizer and the learning-rate schedule (``train.optim``): one class per choice.

``train.optim.optimizer=sgd`` chooses `Sgd`, ``train.optim.optimizer.momentum=0.5`` sets its momentum,
and a momentum under ``adamw`` does not exist. ``train.optim.schedule=linear`` chooses `LinearSchedule`
likewise. What every choice reads (``lr``, ``warmup_steps``, ``grad_clip``) stays on `OptimConfig`;
`train.optim` builds the optax transformation from these settings.
"""

from __future__ import annotations

import dataclasses
import typing

from transformer_jax.core.configlib import Config, Variant, fail, setting, variant
from transformer_jax.core.registry import Registry, unknown_name_message
from transformer_jax.models.param_roles import DECAY_GROUPS


class OptimizerConfig(Variant):
    """Which optimizer updates the parameters (``train.optim.OPTIMIZERS``) and its settings."""

    PATH = "train.optim.optimizer"
    VARIANTS: typing.ClassVar[Registry[type[OptimizerConfig]]] = Registry("optimizer")


def _decay_exclude_groups(cfg: AdamW | Sgd | Muon) -> None:
    """A tuple (a list is made one) of `param_roles.DECAY_GROUPS` names."""
    value = cfg.decay_exclude
    field = f"{cfg.PATH}.decay_exclude"
    if isinstance(value, str) or not isinstance(value, tuple | list):
        fail(field, value, "must be a tuple of group names", "e.g. ('norm', 'bias')")
    for group in value:
        if group not in DECAY_GROUPS:
            fail(field, group, unknown_name_message("parameter group", group, DECAY_GROUPS))
    object.__setattr__(cfg, "decay_exclude", tuple(value))


@variant("adam")
@dataclasses.dataclass(frozen=True)
class Adam(OptimizerConfig):
    """Adam (Kingma & Ba 2014) without weight decay (use `AdamW` to decay)."""

    b1: float = setting(0.9, ge=0.0, lt=1.0)
    b2: float = setting(0.99, ge=0.0, lt=1.0)
    eps: float = setting(1e-8, gt=0.0)


@variant("adamw")
@dataclasses.dataclass(frozen=True)
class AdamW(OptimizerConfig):
    """AdamW (Loshchilov & Hutter 2019): Adam plus decoupled decay ``lr_t * weight_decay * param``
    of the parameters outside the groups ``decay_exclude`` (`train.roles.weight_decay_mask`)."""

    b1: float = setting(0.9, ge=0.0, lt=1.0)
    b2: float = setting(0.99, ge=0.0, lt=1.0)
    eps: float = setting(1e-8, gt=0.0)
    weight_decay: float = setting(0.1, ge=0.0)
    decay_exclude: tuple[str, ...] = DECAY_GROUPS

    def check(self) -> None:
        _decay_exclude_groups(self)


@variant("sgd")
@dataclasses.dataclass(frozen=True)
class Sgd(OptimizerConfig):
    """SGD with (optionally Nesterov) ``momentum`` and decoupled decay (as `AdamW`)."""

    momentum: float = setting(0.9, ge=0.0, lt=1.0)
    nesterov: bool = False
    weight_decay: float = setting(0.1, ge=0.0)
    decay_exclude: tuple[str, ...] = DECAY_GROUPS

    def check(self) -> None:
        _decay_exclude_groups(self)


@variant("muon")
@dataclasses.dataclass(frozen=True)
class Muon(OptimizerConfig):
    """Muon (Jordan et al. 2024) on the hidden matrices, AdamW on the other parameters (see
    `train.optim.muon`). ``train.optim.lr`` is the Muon rate; ``adam_lr`` the peak rate of the AdamW
    part (None: ``lr``; the same schedule, scaled by ``adam_lr / lr``), which reads ``b1``, ``b2``,
    ``eps``. ``momentum``: Muon's Nesterov momentum; ``ns_steps``: its Newton-Schulz iterations;
    ``rms`` (None: ``sqrt(max(1, fan_out / fan_in))``): the RMS each orthogonalised update is scaled
    to, ``rms * sqrt(max(fan_in, fan_out))`` (Moonlight: 0.2, to match AdamW's update size, so the two
    parts can share one rate). Weight decay in both parts as `AdamW`."""

    momentum: float = setting(0.95, ge=0.0, lt=1.0)
    ns_steps: int = setting(5, ge=1)
    rms: float | None = setting(None, gt=0.0)
    adam_lr: float | None = setting(None, gt=0.0)
    b1: float = setting(0.9, ge=0.0, lt=1.0)
    b2: float = setting(0.99, ge=0.0, lt=1.0)
    eps: float = setting(1e-8, gt=0.0)
    weight_decay: float = setting(0.1, ge=0.0)
    decay_exclude: tuple[str, ...] = DECAY_GROUPS

    def check(self) -> None:
        _decay_exclude_groups(self)


class ScheduleConfig(Variant):
    """How the learning rate moves over the run (``train.optim.SCHEDULES``) and its settings; each
    warms up linearly from 0 over ``train.optim.warmup_steps``."""

    PATH = "train.optim.schedule"
    VARIANTS: typing.ClassVar[Registry[type[ScheduleConfig]]] = Registry("schedule")


@variant("cosine")
@dataclasses.dataclass(frozen=True)
class CosineSchedule(ScheduleConfig):
    """Cosine decay from ``lr`` to ``min_lr`` at ``decay_steps`` (counting the warm-up; None: the
    run's steps), then ``min_lr``."""

    min_lr: float = setting(1e-4, ge=0.0)
    decay_steps: int | None = setting(None, ge=1)


@variant("linear")
@dataclasses.dataclass(frozen=True)
class LinearSchedule(ScheduleConfig):
    """Linear decay from ``lr`` to ``min_lr`` at ``decay_steps`` (as `CosineSchedule`)."""

    min_lr: float = setting(1e-4, ge=0.0)
    decay_steps: int | None = setting(None, ge=1)


@variant("constant")
@dataclasses.dataclass(frozen=True)
class ConstantSchedule(ScheduleConfig):
    """``lr`` after the warm-up."""


@variant("inverse_sqrt")
@dataclasses.dataclass(frozen=True)
class InverseSqrtSchedule(ScheduleConfig):
    """Vaswani et al. 2017, eq. 3: ``lr * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)``
    (``lr`` a multiplier, paper: 1.0). ``d_model`` may stay None until the schedule is built
    (``train.config.resolve`` fills it from the model)."""

    d_model: int | None = setting(None, ge=1)


@dataclasses.dataclass(frozen=True)
class OptimConfig(Config):
    """Optimizer, learning-rate schedule and clipping.

    ``lr`` is the peak learning rate (for ``InverseSqrtSchedule`` the multiplier of its formula; for
    ``Muon`` the rate of its matrices); ``warmup_steps`` the linear warm-up of every schedule;
    ``grad_clip`` a global-norm bound (None: no clipping). The optimizer's and the schedule's own
    settings are on their classes (`AdamW`, `CosineSchedule`, ...); a name (``optimizer="sgd"``)
    stands for that choice's defaults.
    """

    optimizer: OptimizerConfig = setting(factory=AdamW)
    lr: float = setting(1e-3, gt=0.0)
    schedule: ScheduleConfig = setting(factory=CosineSchedule)
    warmup_steps: int = setting(100, ge=0)
    grad_clip: float | None = setting(1.0, gt=0.0, hint="none turns clipping off")

    PATH: typing.ClassVar[str] = "train.optim"

    def check(self) -> None:
        for rule in (_warmup_within_decay, _decays_down_to_min_lr, _inverse_sqrt_warmup):
            rule(self)


def _warmup_within_decay(cfg: OptimConfig) -> None:
    schedule = cfg.schedule
    if not isinstance(schedule, CosineSchedule | LinearSchedule) or schedule.decay_steps is None:
        return
    decay_steps = schedule.decay_steps
    if cfg.warmup_steps > decay_steps:
        why = f"exceeds train.optim.schedule.decay_steps={decay_steps}: the decay would end before the warm-up"
        fail("train.optim.warmup_steps", cfg.warmup_steps, why, "lower warmup_steps or raise decay_steps")


def _decays_down_to_min_lr(cfg: OptimConfig) -> None:
    schedule = cfg.schedule
    if isinstance(schedule, CosineSchedule | LinearSchedule) and schedule.min_lr > cfg.lr:
        why = f"exceeds lr={cfg.lr}: the {schedule.kind} schedule decays from lr to min_lr"
        fail("train.optim.schedule.min_lr", schedule.min_lr, why, "set min_lr <= lr")


def _inverse_sqrt_warmup(cfg: OptimConfig) -> None:
    if isinstance(cfg.schedule, InverseSqrtSchedule) and cfg.warmup_steps < 1:
        fail("train.optim.warmup_steps", cfg.warmup_steps, "schedule='inverse_sqrt' needs warmup_steps >= 1",
             "paper: 4000")  # fmt: skip


__all__ = [
    "Adam",
    "AdamW",
    "ConstantSchedule",
    "CosineSchedule",
    "InverseSqrtSchedule",
    "LinearSchedule",
    "Muon",
    "OptimConfig",
    "OptimizerConfig",
    "ScheduleConfig",
    "Sgd",
]
