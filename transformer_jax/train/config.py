"""``TrainConfig`` and the experiment ``Config`` (model + data + train + mesh)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core import configlib
from transformer_jax.core.configlib import ConfigError, fail, setting
from transformer_jax.data.config import DataConfig
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import TRANSFORMER_KINDS
from transformer_jax.models.lora import LoraConfig
from transformer_jax.parallel.config import MeshConfig
from transformer_jax.train.action_config import (
    BestCheckpoint,
    CheckpointConfig,
    EvalConfig,
    HaltOnNonfinite,
    LogConfig,
    NonfiniteConfig,
    SampleConfig,
    SkipNonfinite,
)
from transformer_jax.train.optim_config import InverseSqrtSchedule, OptimConfig


@dataclasses.dataclass(frozen=True)
class LossConfig(configlib.Config):
    """The training objective's extras (``train.loss``; ``ops.losses.cross_entropy``):
    ``label_smoothing`` eps mixes the targets with the uniform distribution (Szegedy et al. 2016);
    ``z_loss`` adds ``z_loss * log(Z)^2`` per token (PaLM)."""

    PATH: ClassVar[str] = "train.loss"
    label_smoothing: float = setting(0.0, ge=0.0, lt=1.0)
    z_loss: float = setting(0.0, ge=0.0)


@dataclasses.dataclass(frozen=True)
class TrainConfig(configlib.Config):
    """The training loop: steps, batch, optimizer, the loss's extras (``loss``), and the settings of its
    periodic actions (``train.action_config``: ``eval``, ``log``, ``checkpoint``, ``sample``, ``nonfinite``).

    ``batch_size`` is the global batch (all processes, all micro-batches); ``grad_accum``
    micro-batches of ``batch_size / grad_accum`` rows make one optimizer step.

    ``init_from``: a Hugging Face model directory or a run's workdir whose weights (and model
    config and tokenizer) the run starts from (``train --init-from DIR``). ``lora`` (None: off,
    ``--set train.lora=on``): train rank-r adapters on a frozen ``init_from`` base instead of
    every weight; its checkpoints hold the adapters and a fingerprint of the base.
    """

    steps: int = setting(2000, ge=1)
    batch_size: int = setting(12, ge=1)
    grad_accum: int = setting(1, ge=1)
    seed: int = 0
    optim: OptimConfig = OptimConfig()
    loss: LossConfig = LossConfig()
    eval: EvalConfig = EvalConfig()
    log: LogConfig = LogConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    sample: SampleConfig = SampleConfig()
    nonfinite: NonfiniteConfig = SkipNonfinite()  # non-finite loss/gradients: skip the update, or halt
    max_minutes: float | None = setting(None, gt=0.0)  # wall-clock budget; the run ends cleanly when reached
    profile: str | None = None  # "START:STOP": a jax.profiler trace of steps START..STOP in WORKDIR/profile/
    init_from: str | None = None  # pretrained weights: a Hugging Face model directory or a run's workdir
    lora: LoraConfig | None = None  # LoRA adapters on a frozen init_from base (None: train every weight)

    PATH: ClassVar[str] = "train"

    def check(self) -> None:
        for rule in (_accumulation_divides_batch, _profile_within_run, _init_from_path, _lora_needs_base):
            rule(self)

    def profile_steps(self) -> tuple[int, int]:
        """(START, STOP) of ``profile="START:STOP"`` (1-based steps, inclusive)."""
        start, sep, stop = str(self.profile).partition(":")
        if not (sep and start.strip().isdigit() and stop.strip().isdigit() and 1 <= int(start) <= int(stop)):
            fail("train.profile", self.profile, "expected START:STOP with 1 <= START <= STOP", "e.g. 10:15")
        return int(start), int(stop)


def _accumulation_divides_batch(cfg: TrainConfig) -> None:
    if cfg.batch_size % cfg.grad_accum:
        fail("train.grad_accum", cfg.grad_accum, f"does not divide batch_size={cfg.batch_size}",
             "use a divisor of the batch size")  # fmt: skip


def _profile_within_run(cfg: TrainConfig) -> None:
    if cfg.profile is not None and cfg.profile_steps()[0] > cfg.steps:
        fail("train.profile", cfg.profile, f"starts after the last step (train.steps={cfg.steps})",
             "profile steps the run reaches")  # fmt: skip


def _init_from_path(cfg: TrainConfig) -> None:
    if cfg.init_from is not None and not cfg.init_from.strip():
        fail("train.init_from", cfg.init_from, "must be a directory path", "or None to train from scratch")


def _lora_needs_base(cfg: TrainConfig) -> None:
    if cfg.lora is not None and cfg.init_from is None:
        fail("train.lora", cfg.lora, "LoRA adapts pretrained weights, and train.init_from is None",
             "set train.init_from (train --init-from DIR) or turn LoRA off (train.lora=none)")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Config:
    """One experiment: what to build (model), on what (data), how (train), where (mesh)."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    mesh: MeshConfig = MeshConfig()
    name: str = "experiment"

    def __post_init__(self):
        m, d = self.model, self.data
        task_kind = "encoder_decoder" if d.task == "seq2seq" else "decoder_lm"
        lm_baseline = d.task == "lm" and m.kind not in TRANSFORMER_KINDS  # ngram, window_lm, rnn_lm
        if m.kind != task_kind and not lm_baseline:
            fail(
                "model.kind",
                m.kind,
                f"data.dataset={d.dataset.kind!r} is a {d.task} task",
                f"use model.kind={task_kind!r} (or another dataset)",
            )
        longest = max(d.seq_len, d.dataset.src_len() or 0 if d.task == "seq2seq" else 0)
        if m.position.kind == "learned" and longest > m.dims.max_len:
            fail(
                "data.seq_len",
                d.seq_len,
                f"is longer than model.dims.max_len={m.dims.max_len} (the learned position table)",
                "raise model.dims.max_len or lower data.seq_len",
            )
        schedule = self.train.optim.schedule
        if isinstance(schedule, InverseSqrtSchedule) and schedule.d_model not in (None, m.dims.d_model):
            fail("train.optim.schedule.d_model", schedule.d_model, f"differs from model.dims.d_model={m.dims.d_model}")


def resolve(cfg: Config) -> Config:
    """Fills values one section derives from another (e.g. the inverse-sqrt schedule's d_model)."""
    schedule = cfg.train.optim.schedule
    if isinstance(schedule, InverseSqrtSchedule) and schedule.d_model is None:
        optim = dataclasses.replace(cfg.train.optim, schedule=InverseSqrtSchedule(d_model=cfg.model.dims.d_model))
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optim=optim))
    return cfg


__all__ = [
    "BestCheckpoint",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "EvalConfig",
    "HaltOnNonfinite",
    "LogConfig",
    "LossConfig",
    "NonfiniteConfig",
    "SampleConfig",
    "SkipNonfinite",
    "TrainConfig",
    "resolve",
]
