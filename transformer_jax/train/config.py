"""``TrainConfig`` and the experiment ``Config`` (model + data + train + mesh)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core import configlib
from transformer_jax.core.configlib import ConfigError, check_choice, fail, setting
from transformer_jax.core.registry import Registry
from transformer_jax.data.config import DataConfig
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import TRANSFORMER_KINDS
from transformer_jax.models.lora import LoraConfig
from transformer_jax.parallel.config import MeshConfig
from transformer_jax.train.loggers import DEFAULT_LOGGERS, LOGGERS
from transformer_jax.train.optim_config import InverseSqrtSchedule, OptimConfig

NONFINITE_POLICIES: Registry[str] = Registry("non-finite policy")
NONFINITE_POLICIES.register("skip", "drop the update and go on", reads=("max_consecutive_skips",))
NONFINITE_POLICIES.register("halt", "stop with an error naming the parameters")
BEST_MODES: Registry[str] = Registry("best-checkpoint mode")
BEST_MODES.register("min", "lower is better (loss, perplexity)")
BEST_MODES.register("max", "higher is better (accuracy, bleu)")


@dataclasses.dataclass(frozen=True)
class TrainConfig(configlib.Config):
    """The training loop: steps, batch, optimizer, evaluation, checkpoints, budgets.

    ``batch_size`` is the global batch (all processes, all micro-batches); ``grad_accum``
    micro-batches of ``batch_size / grad_accum`` rows make one optimizer step.

    ``init_from``: a Hugging Face model directory or a run's workdir whose weights (and model
    config and tokenizer) the run starts from (``train --init-from DIR``). ``lora`` (None: off,
    ``--set train.lora=on``): train rank-r adapters on a frozen ``init_from`` base instead of
    every weight; its checkpoints hold the adapters and a fingerprint of the base.

    ``loggers``: where metrics go, by name (``train.loggers.LOGGERS``; ``--set
    train.loggers=jsonl,tensorboard,wandb``); a logger whose package is missing stops the run
    before it starts, naming the extra to install.
    """

    steps: int = setting(2000, ge=1)
    batch_size: int = setting(12, ge=1)
    grad_accum: int = setting(1, ge=1)
    seed: int = 0
    optim: OptimConfig = OptimConfig()
    label_smoothing: float = setting(0.0, ge=0.0, lt=1.0)
    z_loss: float = setting(0.0, ge=0.0)
    eval_every: int = setting(250, ge=1)
    eval_batches: int | None = setting(50, ge=1)  # batches per validation (None: the whole validation split)
    log_every: int = setting(10, ge=1)
    checkpoint_every: int = setting(500, ge=1)
    keep_checkpoints: int = setting(3, ge=1)
    keep_best: bool = True
    best_metric: str = "loss"  # a validation metric: loss, perplexity, accuracy, or a task's (e.g. bleu)
    best_mode: str = setting("min", choice=BEST_MODES)
    extra_eval: bool = True  # task metrics (e.g. BLEU) at each validation
    max_minutes: float | None = setting(None, gt=0.0)  # wall-clock budget; the run ends cleanly when reached
    nonfinite: str = setting("skip", choice=NONFINITE_POLICIES)  # non-finite loss/gradients: skip the update, or halt
    max_consecutive_skips: int = setting(10, ge=1)
    per_layer_grad_norms: bool = True
    peak_flops: float | None = None  # for MFU; None: a known accelerator peak or a measured GEMM peak
    sample_every: int = setting(0, ge=0)  # print a short sample every N steps (0: only at the end)
    sample_tokens: int = setting(200, ge=0)
    sample_prompt: str = "\n"
    profile: str | None = None  # "START:STOP": a jax.profiler trace of steps START..STOP in WORKDIR/profile/
    init_from: str | None = None  # pretrained weights: a Hugging Face model directory or a run's workdir
    lora: LoraConfig | None = None  # LoRA adapters on a frozen init_from base (None: train every weight)
    loggers: tuple[str, ...] = DEFAULT_LOGGERS  # metric loggers by name: jsonl, tensorboard, wandb
    wandb_project: str = "transformer-jax"  # read by the wandb logger only
    wandb_entity: str | None = None  # wandb team or user (None: the logged-in user's default)

    SELECTORS: ClassVar = (("nonfinite", NONFINITE_POLICIES), ("loggers", LOGGERS))

    PATH: ClassVar[str] = "train"

    def check(self) -> None:
        for rule in (_accumulation_divides_batch, _profile_within_run, _init_from_path, _lora_needs_base):
            rule(self)
        _check_loggers(self)

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


def _check_loggers(cfg: TrainConfig) -> None:
    loggers = cfg.loggers
    if not isinstance(loggers, tuple) or not all(isinstance(n, str) for n in loggers):
        fail("train.loggers", loggers, "must be a tuple of logger names", "e.g. ('jsonl', 'tensorboard')")
    for name in loggers:
        check_choice("train.loggers", name, LOGGERS)
    if len(set(loggers)) != len(loggers):
        fail("train.loggers", loggers, "names a logger twice", "list each logger once")
    if not cfg.wandb_project.strip():
        fail("train.wandb_project", cfg.wandb_project, "must be a non-empty project name")
    if cfg.wandb_entity is not None and not cfg.wandb_entity.strip():
        fail("train.wandb_entity", cfg.wandb_entity, "must be a team or user name", "or None for your default")


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
        if m.position.kind == "learned" and longest > m.max_len:
            fail(
                "data.seq_len",
                d.seq_len,
                f"is longer than model.max_len={m.max_len} (the learned position table)",
                "raise model.max_len or lower data.seq_len",
            )
        schedule = self.train.optim.schedule
        if isinstance(schedule, InverseSqrtSchedule) and schedule.d_model not in (None, m.d_model):
            fail("train.optim.schedule.d_model", schedule.d_model, f"differs from model.d_model={m.d_model}")


def resolve(cfg: Config) -> Config:
    """Fills values one section derives from another (e.g. the inverse-sqrt schedule's d_model)."""
    schedule = cfg.train.optim.schedule
    if isinstance(schedule, InverseSqrtSchedule) and schedule.d_model is None:
        optim = dataclasses.replace(cfg.train.optim, schedule=InverseSqrtSchedule(d_model=cfg.model.d_model))
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optim=optim))
    return cfg


__all__ = ["NONFINITE_POLICIES", "Config", "ConfigError", "TrainConfig", "resolve"]
