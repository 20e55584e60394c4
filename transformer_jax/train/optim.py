"""Optimizer factory: `OptimConfig` -> clip -> optimizer with a learning-rate schedule.

Optimizers and schedules are chosen by name through `OPTIMIZERS` and `SCHEDULES`; adding one is
a function plus a registry line.

Conventions
- The schedule is evaluated at the optax update count: the k-th update (0-based) uses
  ``learning_rate_at(cfg, total_steps, k)``.
- Weight decay is decoupled (AdamW; SGDW for ``sgd``; both parts of ``muon``): each update
  subtracts ``lr_t * weight_decay * param`` from every decayed parameter. ``adam`` never decays
  (use ``adamw``). Which parameters decay is decided by `weight_decay_mask` and
  ``cfg.decay_exclude``.
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
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp
import optax

from transformer_jax.core.configlib import Config, check_int, fail, setting
from transformer_jax.core.registry import Registry, unknown_name_message
from transformer_jax.models.param_roles import DECAY_GROUPS
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


@dataclasses.dataclass(frozen=True)
class OptimConfig(Config):
    """Optimizer, learning-rate schedule, clipping and weight decay.

    ``lr`` is the peak learning rate, except for ``schedule="inverse_sqrt"`` where it is the
    multiplier of ``d_model**-0.5 * ...`` (paper: 1.0). ``decay_steps`` (cosine/linear; counts
    the warm-up too) defaults to the ``total_steps`` given to the factory; after it the rate
    stays at ``min_lr``. ``grad_clip`` is a global-norm bound (None: no clipping).
    ``decay_exclude`` names the parameter groups weight decay skips (see `weight_decay_mask`).
    ``d_model`` may stay None until the schedule is built (`make_schedule` raises if
    ``inverse_sqrt`` still lacks it), so a whole-experiment config can fill it from the model.

    ``optimizer="muon"`` (see `muon`): ``lr`` is the Muon learning rate of the hidden matrices,
    ``adam_lr`` the peak rate of the AdamW part (None: ``lr``; the same schedule, scaled by
    ``adam_lr / lr``), ``muon_momentum`` Muon's Nesterov momentum, ``muon_ns_steps`` its
    Newton-Schulz iterations, ``muon_rms`` (None: ``sqrt(max(1, fan_out / fan_in))``) the RMS each
    orthogonalised update is scaled to, ``rms * sqrt(max(fan_in, fan_out))`` (Moonlight: 0.2, to
    match AdamW's update size, so the two parts can share one rate).
    """

    optimizer: str = setting("adamw", choice=OPTIMIZERS)
    lr: float = setting(1e-3, gt=0.0)
    schedule: str = setting("cosine", choice=SCHEDULES)
    warmup_steps: int = setting(100, ge=0)
    min_lr: float = setting(1e-4, ge=0.0)
    decay_steps: int | None = setting(None, ge=1)
    b1: float = setting(0.9, ge=0.0, lt=1.0)
    b2: float = setting(0.99, ge=0.0, lt=1.0)
    eps: float = setting(1e-8, gt=0.0)
    weight_decay: float = setting(0.1, ge=0.0)
    momentum: float = setting(0.9, ge=0.0, lt=1.0)
    nesterov: bool = False
    grad_clip: float | None = setting(1.0, gt=0.0)  # None: no clipping
    decay_exclude: tuple[str, ...] = DECAY_GROUPS
    d_model: int | None = setting(None, ge=1)
    adam_lr: float | None = setting(None, gt=0.0)
    muon_momentum: float = setting(0.95, ge=0.0, lt=1.0)
    muon_ns_steps: int = setting(5, ge=1)
    muon_rms: float | None = setting(None, gt=0.0)

    SELECTORS: ClassVar = (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES))
    PATH: ClassVar[str] = "train.optim"

    def check(self) -> None:
        for rule in (_warmup_within_decay, _decays_down_to_min_lr, _inverse_sqrt_warmup, _decay_exclude_groups):
            rule(self)


def _warmup_within_decay(cfg: OptimConfig) -> None:
    if cfg.decay_steps is not None and cfg.schedule in ("cosine", "linear") and cfg.warmup_steps > cfg.decay_steps:
        why = f"exceeds decay_steps={cfg.decay_steps}: the decay would end before the warm-up"
        fail("train.optim.warmup_steps", cfg.warmup_steps, why, "lower warmup_steps or raise decay_steps")


def _decays_down_to_min_lr(cfg: OptimConfig) -> None:
    if cfg.schedule in ("cosine", "linear") and cfg.min_lr > cfg.lr:
        why = f"exceeds lr={cfg.lr}: the {cfg.schedule} schedule decays from lr to min_lr"
        fail("train.optim.min_lr", cfg.min_lr, why, "set min_lr <= lr")


def _inverse_sqrt_warmup(cfg: OptimConfig) -> None:
    if cfg.schedule == "inverse_sqrt" and cfg.warmup_steps < 1:
        fail("train.optim.warmup_steps", cfg.warmup_steps, "schedule='inverse_sqrt' needs warmup_steps >= 1",
             "paper: 4000")  # fmt: skip


def _decay_exclude_groups(cfg: OptimConfig) -> None:
    """A tuple (a list is made one) of `param_roles.DECAY_GROUPS` names."""
    value = cfg.decay_exclude
    if isinstance(value, str) or not isinstance(value, tuple | list):
        fail("train.optim.decay_exclude", value, "must be a tuple of group names", "e.g. ('norm', 'bias')")
    for group in value:
        if group not in DECAY_GROUPS:
            fail("train.optim.decay_exclude", group, unknown_name_message("parameter group", group, DECAY_GROUPS))
    object.__setattr__(cfg, "decay_exclude", tuple(value))


# ---------------------------------------------------------------------------------------------
# Schedules: fn(cfg, total_steps) -> optax.Schedule (jit-able in the update count).


def _decay_steps(cfg: OptimConfig, total_steps: int) -> int:
    return cfg.decay_steps if cfg.decay_steps is not None else total_steps


def _warmup(cfg: OptimConfig) -> optax.Schedule:
    """Linear ramp from 0 (step 0) to lr (step warmup_steps)."""
    return optax.linear_schedule(0.0, cfg.lr, cfg.warmup_steps)


def _after_warmup(cfg: OptimConfig, then: optax.Schedule) -> optax.Schedule:
    return then if cfg.warmup_steps == 0 else optax.join_schedules([_warmup(cfg), then], [cfg.warmup_steps])


@SCHEDULES.register("cosine", reads=("warmup_steps", "min_lr", "decay_steps"))
def cosine_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps``, then ``min_lr + (lr - min_lr)(1 + cos(pi t))/2``
    with ``t = (step - warmup) / (decay_steps - warmup)`` clipped to [0, 1]
    (``optax.warmup_cosine_decay_schedule``)."""
    decay = max(_decay_steps(cfg, total_steps), cfg.warmup_steps + 1)
    return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup_steps, decay, end_value=cfg.min_lr)


@SCHEDULES.register("linear", reads=("warmup_steps", "min_lr", "decay_steps"))
def linear_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps``, then linear lr -> ``min_lr`` at ``decay_steps``."""
    decay = max(_decay_steps(cfg, total_steps) - cfg.warmup_steps, 1)
    return _after_warmup(cfg, optax.linear_schedule(cfg.lr, cfg.min_lr, decay))


@SCHEDULES.register("constant", reads=("warmup_steps",))
def constant_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Warm-up 0 -> lr over ``warmup_steps`` (none if 0), then lr."""
    del total_steps
    return _after_warmup(cfg, optax.constant_schedule(cfg.lr))


@SCHEDULES.register("inverse_sqrt", reads=("warmup_steps", "d_model"))
def inverse_sqrt_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Vaswani et al. 2017, eq. 3, with ``s = step + 1`` (the 1-based update number):

    ``lr_t = lr * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)``.

    Rises linearly for ``s <= warmup_steps``, peaks at ``s = warmup_steps`` (update count
    ``warmup_steps - 1``) with ``lr * (d_model * warmup_steps)**-0.5``, then decays as
    ``s**-0.5``. ``min_lr`` and ``decay_steps`` are not used.
    """
    del total_steps
    if cfg.d_model is None:
        raise ValueError(
            "d_model=None: schedule='inverse_sqrt' scales by d_model**-0.5; set "
            "train.optim.d_model to the model width (train.config.resolve fills it from the model)"
        )
    scale = cfg.lr * cfg.d_model**-0.5

    def schedule(step):
        s = jnp.asarray(step, jnp.float32) + 1.0
        return scale * jnp.minimum(s**-0.5, s * cfg.warmup_steps**-1.5)

    return schedule


def make_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """The learning-rate schedule of ``cfg`` for a run of ``total_steps`` updates (`warn_schedule`
    says, once, when training starts, what in it may surprise)."""
    check_int("total_steps", total_steps, low=1)
    return SCHEDULES.get(cfg.schedule)(cfg, total_steps)


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
    if cfg.schedule == "inverse_sqrt" and cfg.d_model is not None and cfg.lr < 0.01:
        peak = cfg.lr * cfg.d_model**-0.5 * cfg.warmup_steps**-0.5
        warnings.warn(
            f"schedule='inverse_sqrt' uses lr={cfg.lr} as a multiplier (paper: 1.0); the peak "
            f"learning rate will be {peak:.3g}",
            stacklevel=2,
        )


def learning_rate_at(cfg: OptimConfig, total_steps: int, step: int) -> float:
    """The learning rate the update with (0-based) count ``step`` uses; for logging."""
    return float(jnp.asarray(make_schedule(cfg, total_steps)(step)))


# ---------------------------------------------------------------------------------------------
# Optimizers: fn(cfg, learning_rate, roles: train.roles.ParamRoles) -> optax.GradientTransformation.


def _decoupled_decay(cfg: OptimConfig, mask) -> optax.GradientTransformation:
    if cfg.weight_decay == 0.0:
        return optax.identity()
    return optax.add_decayed_weights(cfg.weight_decay, mask=mask)


@OPTIMIZERS.register("adam", reads=("b1", "b2", "eps"))
def adam(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """Adam (Kingma & Ba 2014) without weight decay (setting ``weight_decay`` is refused: use adamw)."""
    del roles
    return optax.adam(learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)


@OPTIMIZERS.register("adamw", reads=("b1", "b2", "eps", "weight_decay", "decay_exclude"))
def adamw(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """AdamW (Loshchilov & Hutter 2019): Adam plus decoupled decay ``lr_t * wd * param``."""
    return optax.chain(
        optax.scale_by_adam(b1=cfg.b1, b2=cfg.b2, eps=cfg.eps),
        _decoupled_decay(cfg, roles.optax_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


@OPTIMIZERS.register("sgd", reads=("momentum", "nesterov", "weight_decay", "decay_exclude"))
def sgd(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """SGD with (optionally Nesterov) momentum and decoupled decay ``lr_t * wd * param``."""
    return optax.chain(
        optax.trace(decay=cfg.momentum, nesterov=cfg.nesterov),
        _decoupled_decay(cfg, roles.optax_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


# Muon on the hidden matrices (roles `MATRIX_ROLES`), AdamW on the rest.


def _scaled(schedule: optax.Schedule, factor: float) -> optax.Schedule:
    return schedule if factor == 1.0 else (lambda step: schedule(step) * factor)


@OPTIMIZERS.register(
    "muon",
    reads=(
        "b1",
        "b2",
        "eps",
        "weight_decay",
        "decay_exclude",
        "adam_lr",
        "muon_momentum",
        "muon_ns_steps",
        "muon_rms",
    ),
)
def muon(cfg: OptimConfig, learning_rate: optax.Schedule, roles: ParamRoles) -> optax.GradientTransformation:
    """Muon (Jordan et al. 2024) on the hidden and expert matrices, AdamW on everything else.

    Muon parameters (`param_roles.MATRIX_ROLES`): the update is the Nesterov momentum
    (``muon_momentum``) of the gradient, bias-corrected, orthogonalised by ``muon_ns_steps``
    quintic Newton-Schulz iterations (coefficients 3.4445, -4.7750, 2.0315; ``optax.contrib.
    scale_by_muon``) of each matrix of its `param_roles.MatrixView` (q [D, H, Dh] as a
    [D, H*Dh] matrix, o [H, Dh, D] as [H*Dh, D], a scanned or expert axis as a batch of
    matrices), scaled by shape (see `OptimConfig`), plus ``weight_decay * param``, times ``lr_t``.

    AdamW parameters (embeddings, positions, head, norms, biases, router, other): exactly
    ``optimizer="adamw"`` with the rate ``adam_lr`` (scheduled like ``lr``). The router stays on
    AdamW: a [D, E] classifier onto a few experts, like the head, not a hidden map.

    Weight decay in both parts follows `weight_decay_mask` (``decay_exclude``).
    """
    part = dataclasses.replace(roles, mask=None)  # each part sees a partition's tree: its mask is computed
    infos = roles.infos
    adam_rate = _scaled(learning_rate, 1.0 if cfg.adam_lr is None else cfg.adam_lr / cfg.lr)
    matrices = optax.chain(
        optax.contrib.scale_by_muon(
            ns_steps=cfg.muon_ns_steps,
            beta=cfg.muon_momentum,
            nesterov=True,
            weight_dimension_numbers=lambda tree: muon_dimension_numbers(tree, infos=infos),
        ),
        scale_by_matrix_shape(cfg.muon_rms, infos=infos),
        _decoupled_decay(cfg, part.decay_mask),
        optax.scale_by_learning_rate(learning_rate),
    )
    labels = lambda tree: muon_labels(tree, infos=infos)
    return optax.partition({"muon": matrices, "adamw": adamw(cfg, adam_rate, part)}, labels)


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
    roles = ParamRoles(infos, cfg.decay_exclude)
    if param_info is not None and not adapters_only:  # the adapters' optimizer sees a masked tree
        roles = dataclasses.replace(roles, mask=roles.decay_mask(param_info))
    clip = optax.identity() if cfg.grad_clip is None else optax.clip_by_global_norm(cfg.grad_clip)
    tx = optax.chain(clip, OPTIMIZERS.get(cfg.optimizer)(cfg, schedule, roles))
    if adapters_only:
        labels = lambda tree: adapter_labels(tree, infos=infos)
        tx = optax.multi_transform({"adapters": tx, "frozen": optax.set_to_zero()}, labels)
    return Optimizer(tx, schedule)


__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "OptimConfig",
    "Optimizer",
    "learning_rate_at",
    "make_optimizer",
    "make_schedule",
    "muon_dimension_numbers",
    "param_groups",
    "warn_schedule",
    "weight_decay_mask",
]
