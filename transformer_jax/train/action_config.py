"""The settings of the training loop's periodic actions (``train.actions``), each group beside the
action that reads it: ``train.eval`` (validation), ``train.log`` (train metrics and where they go),
``train.checkpoint`` (with its best checkpoint, ``train.checkpoint.best``; None: none kept),
``train.sample`` and ``train.nonfinite`` (what the log does with a non-finite step: one class per
policy, chosen by name, so ``max_consecutive`` exists only under ``skip``).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import ClassVar

from transformer_jax.core.configlib import Config, Variant, check_choice, fail, setting, variant
from transformer_jax.core.registry import Registry
from transformer_jax.train.loggers import DEFAULT_LOGGERS, LOGGERS, WandbConfig

BestMode = typing.Literal["min", "max"]  # lower is better (loss, perplexity) / higher (accuracy, bleu)


@dataclasses.dataclass(frozen=True)
class EvalConfig(Config):
    """Validation (the ``Validate`` action) every ``every`` steps, at the last step and when a run
    stops early: ``batches`` batches of the validation split (None: all of it), with the task's
    metrics (e.g. BLEU) when ``extra``."""

    every: int = setting(250, ge=1)
    batches: int | None = setting(50, ge=1)
    extra: bool = True

    PATH: ClassVar[str] = "train.eval"


@dataclasses.dataclass(frozen=True)
class LogConfig(Config):
    """Train metrics (the ``Log`` action) every ``every`` steps and where they go: the ``loggers``
    by name (``jsonl``, ``tensorboard``) and a Weights & Biases run when ``wandb`` is set (``--set
    train.log.wandb=on``; None: none); a logger whose package is missing stops the run before it
    starts, naming the extra to install. ``peak_flops``: the MFU's denominator (None: a known
    accelerator peak or a measured GEMM peak); ``per_layer_grad_norms``: log ``grad_norm/<layer>``."""

    every: int = setting(10, ge=1)
    loggers: tuple[str, ...] = DEFAULT_LOGGERS
    wandb: WandbConfig | None = None
    peak_flops: float | None = setting(None, gt=0.0)
    per_layer_grad_norms: bool = True

    PATH: ClassVar[str] = "train.log"

    def check(self) -> None:
        where, loggers = f"{self.PATH}.loggers", self.loggers
        if not isinstance(loggers, tuple) or not all(isinstance(n, str) for n in loggers):
            fail(where, loggers, "must be a tuple of logger names", "e.g. ('jsonl', 'tensorboard')")
        if "wandb" in loggers:
            fail(where, loggers, "the wandb logger has settings of its own",
                 "turn it on with train.log.wandb=on (its settings: project, entity)")  # fmt: skip
        for name in loggers:
            check_choice(where, name, [n for n in LOGGERS.names() if n != "wandb"], "logger")
        if len(set(loggers)) != len(loggers):
            fail(where, loggers, "names a logger twice", "list each logger once")

    def logger_names(self) -> tuple[str, ...]:
        """Every logger the run writes to: ``loggers``, and ``wandb`` when it is set."""
        return self.loggers + (() if self.wandb is None else ("wandb",))


@dataclasses.dataclass(frozen=True)
class BestCheckpoint(Config):
    """A copy of the checkpoint with the best validation ``metric`` (loss, perplexity, accuracy,
    or a task's, e.g. bleu) in ``WORKDIR/best/``; ``mode``: whether lower or higher is better."""

    metric: str = "loss"
    mode: BestMode = "min"

    PATH: ClassVar[str] = "train.checkpoint.best"

    def check(self) -> None:
        if not self.metric.strip():
            fail(f"{self.PATH}.metric", self.metric, "must name a validation metric", "e.g. loss or bleu")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Config):
    """A checkpoint every ``every`` steps and at the end, the latest ``keep`` of them kept, and the
    ``best`` one (None: no best checkpoint)."""

    every: int = setting(500, ge=1)
    keep: int = setting(3, ge=1)
    best: BestCheckpoint | None = BestCheckpoint()

    PATH: ClassVar[str] = "train.checkpoint"


@dataclasses.dataclass(frozen=True)
class SampleConfig(Config):
    """A short sample of ``tokens`` tokens after ``prompt``, printed every ``every`` steps (0: never)
    and at the end of ``train`` (``--sample-tokens`` there)."""

    every: int = setting(0, ge=0)
    tokens: int = setting(200, ge=0)
    prompt: str = "\n"

    PATH: ClassVar[str] = "train.sample"


class NonfiniteConfig(Variant):
    """What the loop does with a step whose loss or gradients are not finite (the update is never
    applied): go on, or stop with an error naming the parameters."""

    PATH = "train.nonfinite"
    VARIANTS: typing.ClassVar[Registry[type[NonfiniteConfig]]] = Registry("non-finite policy")


@variant("skip")
@dataclasses.dataclass(frozen=True)
class SkipNonfinite(NonfiniteConfig):
    """Drop the update and go on; halt after ``max_consecutive`` such steps in a row."""

    max_consecutive: int = setting(10, ge=1)


@variant("halt")
@dataclasses.dataclass(frozen=True)
class HaltOnNonfinite(NonfiniteConfig):
    """Stop at the first non-finite step (every step is then checked as it is logged)."""


__all__ = [
    "BestCheckpoint",
    "BestMode",
    "CheckpointConfig",
    "EvalConfig",
    "HaltOnNonfinite",
    "LogConfig",
    "NonfiniteConfig",
    "SampleConfig",
    "SkipNonfinite",
]
