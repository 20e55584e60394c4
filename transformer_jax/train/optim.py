"""Optimizer factory: `OptimConfig` -> clip -> optimizer with a learning-rate schedule.

The settings are `train.optim_config`'s classes, one per optimizer and schedule; the functions that
build them are found by the chosen settings' kind in `OPTIMIZERS` and `SCHEDULES`. Adding one is a
settings class there and a function plus a registry line here.

Conventions
- The schedule is evaluated at the optax update count: the k-th update (0-based) uses
  ``learning_rate_at(cfg, total_steps, k)``.
- Weight decay is decoupled (AdamW; SGDW for ``sgd``; both parts of ``muon``): each update
  subtracts ``lr_t * weight_decay * param`` from every decayed parameter. ``adam`` never decays
  (use ``adamw``). Which parameters decay is decided by `weight_decay_mask` and the optimizer's
  ``decay_exclude``.
- Which parameters are matrices for Muon, and how a 3-D/4-D kernel is one (or a batch of them), is
  decided by the same `param_roles.ParamInfo`s the decay mask reads (`train.roles`): the model's
  own (``make_optimizer(..., infos=train.state.model_infos(model_cfg))``), or, for a bare
  parameter tree, explicitly, the path rules (``infos=None``).
- Gradient accumulation is not done here. The train step sums (then averages) micro-batch
  gradients itself, e.g. in a ``lax.scan``, and calls the optimizer once per step. This keeps the
  schedule and optimizer state counting real steps, needs no extra accumulator in the optimizer
  state, and gives results that do not depend on where a checkpoint fell inside an accumulation
  window. (``optax.MultiSteps`` is deliberately not wrapped.)
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
import optax

from transformer_jax.core.configlib import check_int
from transformer_jax.core.registry import Registry
from transformer_jax.models.param_roles import DECAY_GROUPS
from transformer_jax.train.optim_config import (
    Adam,
    AdamW,
    ConstantSchedule,
    CosineSchedule,
    InverseSqrtSchedule,
    LinearSchedule,
    Muon,
    OptimConfig,
    OptimizerConfig,
    ScheduleConfig,
    Sgd,
)
from transformer_jax.train.roles import (
    ParamRoles,
    adapter_labels,
    muon_dimension_numbers,
    muon_labels,
    param_groups,
    scale_by_matrix_shape,
    weight_decay_mask,
)

OPTIMIZERS: Registry[Callable[..., optax.GradientTransformation]] = Registry("optimizer")
SCHEDULES: Registry[Callable[..., optax.Schedule]] = Registry("schedule")


# ---------------------------------------------------------------------------------------------
# Schedules: fn(cfg, total_steps) -> optax.Schedule (jit-able in the update count), by the kind of
# ``cfg.schedule``.


def _decay_steps(schedule: CosineSchedule | LinearSchedule, total_steps: int) -> int:
    return schedule.decay_steps if schedule.decay_steps is not None else total_steps


def _warmup(cfg: OptimConfig) -> optax.Schedule:
    """Linear ramp from 0 (step 0) to lr (step warmup_steps)."""
    return optax.linear_schedule(0.0, cfg.lr, cfg.warmup_steps)


def _after_warmup(cfg: OptimConfig, then: optax.Schedule) -> optax.Schedule:
    return then if cfg.warmup_steps == 0 else optax.join_schedules([_warmup(cfg), then], [cfg.warmup_steps])


@SCHEDULES.register("cosine")
def cosine_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps``, then ``min_lr + (lr - min_lr)(1 + cos(pi t))/2``
    with ``t = (step - warmup) / (decay_steps - warmup)`` clipped to [0, 1]
    (``optax.warmup_cosine_decay_schedule``)."""
    schedule = typing.cast(CosineSchedule, cfg.schedule)
    decay = max(_decay_steps(schedule, total_steps), cfg.warmup_steps + 1)
    return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup_steps, decay, end_value=schedule.min_lr)


@SCHEDULES.register("linear")
def linear_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps``, then linear lr -> ``min_lr`` at ``decay_steps``."""
    schedule = typing.cast(LinearSchedule, cfg.schedule)
    decay = max(_decay_steps(schedule, total_steps) - cfg.warmup_steps, 1)
    return _after_warmup(cfg, optax.linear_schedule(cfg.lr, schedule.min_lr, decay))


@SCHEDULES.register("constant")
def constant_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps`` (none if 0), then lr."""
    del total_steps
    return _after_warmup(cfg, optax.constant_schedule(cfg.lr))


@SCHEDULES.register("inverse_sqrt")
def inverse_sqrt_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Vaswani et al. 2017, eq. 3, with ``s = step + 1`` (the 1-based update number):

    ``lr_t = lr * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)``.

    Rises linearly for ``s <= warmup_steps``, peaks at ``s = warmup_steps`` (update count
    ``warmup_steps - 1``) with ``lr * (d_model * warmup_steps)**-0.5``, then decays as ``s**-0.5``.
    """
    del total_steps
    d_model = typing.cast(InverseSqrtSchedule, cfg.schedule).d_model
    if d_model is None:
        raise ValueError(
            "d_model=None: schedule='inverse_sqrt' scales by d_model**-0.5; set "
            "train.optim.schedule.d_model to the model width (train.config.resolve fills it from the model)"
        )
    scale = cfg.lr * d_model**-0.5
    warmup = cfg.warmup_steps

    def schedule(step):
        s = jnp.asarray(step, jnp.float32) + 1.0
        return scale * jnp.minimum(s**-0.5, s * warmup**-1.5)

    return schedule


def make_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """The learning-rate schedule of ``cfg`` for a run of ``total_steps`` updates (`warn_schedule`
    says, once, when training starts, what in it may surprise)."""
    check_int("total_steps", total_steps, low=1)
    return SCHEDULES.get(cfg.schedule.kind)(cfg, total_steps)


def warn_schedule(cfg: OptimConfig, total_steps: int) -> None:
    """Warnings for a training run (not for eval/sample/export, which build the same schedule): a
    warm-up longer than the run (the rate never reaches its peak; short smoke runs still work) and
    an inverse-sqrt ``lr`` that looks like a learning rate rather than the paper's multiplier."""
    if cfg.warmup_steps > total_steps:  # (warmup > decay_steps is a config error)
        warnings.warn(
            f"warmup_steps={cfg.warmup_steps} > total_steps={total_steps}: the learning rate "
            f"never reaches its peak; lower train.optim.warmup_steps",
            stacklevel=2,
        )
    d_model = cfg.schedule.d_model if isinstance(cfg.schedule, InverseSqrtSchedule) else None
    if d_model is not None and cfg.lr < 0.01:
        peak = cfg.lr * d_model**-0.5 * cfg.warmup_steps**-0.5
        warnings.warn(
            f"schedule='inverse_sqrt' uses lr={cfg.lr} as a multiplier (paper: 1.0); the peak "
            f"learning rate will be {peak:.3g}",
            stacklevel=2,
        )


def learning_rate_at(cfg: OptimConfig, total_steps: int, step: int) -> float:
    """The learning rate the update with (0-based) count ``step`` uses; for logging."""
    return float(jnp.asarray(make_schedule(cfg, total_steps)(step)))


# ---------------------------------------------------------------------------------------------
# Optimizers: fn(cfg, learning_rate, roles: train.roles.ParamRoles) -> optax.GradientTransformation,
# by the kind of ``cfg.optimizer``.


def _decoupled_decay(weight_decay: float, mask) -> optax.GradientTransformation:
    if weight_decay == 0.0:
        return optax.identity()
    return optax.add_decayed_weights(weight_decay, mask=mask)


@OPTIMIZERS.register("adam")
def adam(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """Adam (Kingma & Ba 2014) without weight decay (use adamw)."""
    del roles
    opt = typing.cast(Adam, cfg.optimizer)
    return optax.adam(learning_rate, b1=opt.b1, b2=opt.b2, eps=opt.eps)


def _adamw(opt: AdamW | Muon, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    return optax.chain(
        optax.scale_by_adam(b1=opt.b1, b2=opt.b2, eps=opt.eps),
        _decoupled_decay(opt.weight_decay, roles.optax_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


@OPTIMIZERS.register("adamw")
def adamw(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """AdamW (Loshchilov & Hutter 2019): Adam plus decoupled decay ``lr_t * wd * param``."""
    return _adamw(typing.cast(AdamW, cfg.optimizer), learning_rate, roles)


@OPTIMIZERS.register("sgd")
def sgd(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """SGD with (optionally Nesterov) momentum and decoupled decay ``lr_t * wd * param``."""
    opt = typing.cast(Sgd, cfg.optimizer)
    return optax.chain(
        optax.trace(decay=opt.momentum, nesterov=opt.nesterov),
        _decoupled_decay(opt.weight_decay, roles.optax_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


# Muon on the hidden matrices (roles `MATRIX_ROLES`), AdamW on the rest.


def _scaled(schedule: optax.Schedule, factor: float) -> optax.Schedule:
    return schedule if factor == 1.0 else (lambda step: schedule(step) * factor)


@OPTIMIZERS.register("muon")
def muon(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """Muon (Jordan et al. 2024) on the hidden and expert matrices, AdamW on everything else.

    Muon parameters (`param_roles.MATRIX_ROLES`): the update is the Nesterov momentum
    (``momentum``) of the gradient, bias-corrected, orthogonalised by ``ns_steps`` quintic
    Newton-Schulz iterations (coefficients 3.4445, -4.7750, 2.0315; ``optax.contrib.
    scale_by_muon``) of each matrix of its `param_roles.MatrixView` (q [D, H, Dh] as a
    [D, H*Dh] matrix, o [H, Dh, D] as [H*Dh, D], a scanned or expert axis as a batch of
    matrices), scaled by shape (see `Muon`), plus ``weight_decay * param``, times ``lr_t``.

    AdamW parameters (embeddings, positions, head, norms, biases, router, other): exactly
    ``optimizer="adamw"`` with the rate ``adam_lr`` (scheduled like ``lr``). The router stays on
    AdamW: a [D, E] classifier onto a few experts, like the head, not a hidden map.

    Weight decay in both parts follows `weight_decay_mask` (``decay_exclude``).
    """
    opt = typing.cast(Muon, cfg.optimizer)
    part = dataclasses.replace(roles, mask=None)  # each part sees a partition's tree: its mask is computed
    infos = roles.infos
    adam_rate = _scaled(learning_rate, 1.0 if opt.adam_lr is None else opt.adam_lr / cfg.lr)
    matrices = optax.chain(
        optax.contrib.scale_by_muon(
            ns_steps=opt.ns_steps,
            beta=opt.momentum,
            nesterov=True,
            weight_dimension_numbers=lambda tree: muon_dimension_numbers(tree, infos=infos),
        ),
        scale_by_matrix_shape(opt.rms, infos=infos),
        _decoupled_decay(opt.weight_decay, part.decay_mask),
        optax.scale_by_learning_rate(learning_rate),
    )
    labels = lambda tree: muon_labels(tree, infos=infos)
    return optax.partition({"muon": matrices, "adamw": _adamw(opt, adam_rate, part)}, labels)


class Optimizer(NamedTuple):
    """The gradient transformation and the learning-rate schedule it uses (for logging)."""

    tx: optax.GradientTransformation
    schedule: optax.Schedule


def make_optimizer(
    cfg: OptimConfig, total_steps: int, *, infos: Any = None, param_info: Any = None, adapters_only: bool = False
) -> Optimizer:
    """``clip_by_global_norm(grad_clip)`` -> the optimizer of ``cfg`` with `make_schedule`, and that
    schedule: ``tx, schedule = make_optimizer(cfg, steps, infos=model_infos(model_cfg))``.

    ``infos``: the model's `param_roles.ParamInfo` pytree (`train.state.model_infos`), shaped like
    the parameters the optimizer will see; the weight-decay mask, Muon's partition and matrix views
    and the LoRA labels read it. None: each is computed from the parameters' paths
    (`param_roles.classify`), for parameter trees without a model.

    ``param_info``: optionally the parameter pytree (arrays or ``ShapeDtypeStruct``s) to build the
    weight-decay mask once, up front, rather than from whatever tree the optimizer is given.

    ``adapters_only`` (LoRA): clipping and the optimizer see only the LoRA adapter factors (role
    ``adapter``); every other parameter gets a zero update and keeps no optimizer state
    (``optax.multi_transform`` with ``optax.set_to_zero``).
    """
    schedule = make_schedule(cfg, total_steps)
    roles = ParamRoles(infos, getattr(cfg.optimizer, "decay_exclude", DECAY_GROUPS))
    if param_info is not None and not adapters_only:  # the adapters' optimizer sees a masked tree
        roles = dataclasses.replace(roles, mask=roles.decay_mask(param_info))
    clip = optax.identity() if cfg.grad_clip is None else optax.clip_by_global_norm(cfg.grad_clip)
    tx = optax.chain(clip, OPTIMIZERS.get(cfg.optimizer.kind)(cfg, schedule, roles))
    if adapters_only:
        labels = lambda tree: adapter_labels(tree, infos=infos)
        tx = optax.multi_transform({"adapters": tx, "frozen": optax.set_to_zero()}, labels)
    return Optimizer(tx, schedule)


__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "Adam",
    "AdamW",
    "ConstantSchedule",
    "CosineSchedule",
    "InverseSqrtSchedule",
    "LinearSchedule",
    "Muon",
    "OptimConfig",
    "Optimizer",
    "OptimizerConfig",
    "ScheduleConfig",
    "Sgd",
    "learning_rate_at",
    "make_optimizer",
    "make_schedule",
    "muon_dimension_numbers",
    "param_groups",
    "warn_schedule",
    "weight_decay_mask",
]
