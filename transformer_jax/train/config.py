"""``TrainConfig`` and the experiment ``Config`` (model + data + train + mesh)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import ConfigError, check_choice, check_positive, check_range, check_types, fail
from transformer_jax.core.registry import Registry
from transformer_jax.data.config import DataConfig
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import TRANSFORMER_KINDS
from transformer_jax.models.lora import LoraConfig
from transformer_jax.parallel.config import MeshConfig
from transformer_jax.train.loggers import DEFAULT_LOGGERS, LOGGERS
from transformer_jax.train.optim import OptimConfig

NONFINITE_POLICIES: Registry[str] = Registry("non-finite policy")
NONFINITE_POLICIES.register("skip", "drop the update and go on", reads=("max_consecutive_skips",))
NONFINITE_POLICIES.register("halt", "stop with an error naming the parameters")
BEST_MODES: Registry[str] = Registry("best-checkpoint mode")
BEST_MODES.register("min", "lower is better (loss, perplexity)")
BEST_MODES.register("max", "higher is better (accuracy, bleu)")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
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

    steps: int = 2000
    batch_size: int = 12
    grad_accum: int = 1
    seed: int = 0
    optim: OptimConfig = OptimConfig()
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    eval_every: int = 250
    eval_batches: int | None = 50  # batches per validation (None: the whole validation split)
    log_every: int = 10
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    keep_best: bool = True
    best_metric: str = "loss"  # a validation metric: loss, perplexity, accuracy, or a task's (e.g. bleu)
    best_mode: str = "min"
    extra_eval: bool = True  # task metrics (e.g. BLEU) at each validation
    max_minutes: float | None = None  # wall-clock budget; the run ends cleanly when reached
    nonfinite: str = "skip"  # non-finite loss/gradients: skip the update, or halt
    max_consecutive_skips: int = 10
    per_layer_grad_norms: bool = True
    peak_flops: float | None = None  # for MFU; None: a known accelerator peak or a measured GEMM peak
    sample_every: int = 0  # print a short sample every N steps (0: only at the end)
    sample_tokens: int = 200
    sample_prompt: str = "\n"
    profile: str | None = None  # "START:STOP": a jax.profiler trace of steps START..STOP in WORKDIR/profile/
    init_from: str | None = None  # pretrained weights: a Hugging Face model directory or a run's workdir
    lora: LoraConfig | None = None  # LoRA adapters on a frozen init_from base (None: train every weight)
    loggers: tuple[str, ...] = DEFAULT_LOGGERS  # metric loggers by name: jsonl, tensorboard, wandb
    wandb_project: str = "transformer-jax"  # read by the wandb logger only
    wandb_entity: str | None = None  # wandb team or user (None: the logged-in user's default)

    SELECTORS: ClassVar = (("nonfinite", NONFINITE_POLICIES), ("loggers", LOGGERS))

    def __post_init__(self):
        check_types(self, "train")
        check_positive("train.steps", self.steps)
        check_positive("train.batch_size", self.batch_size)
        check_positive("train.grad_accum", self.grad_accum)
        if self.batch_size % self.grad_accum:
            fail(
                "train.grad_accum",
                self.grad_accum,
                f"does not divide batch_size={self.batch_size}",
                "use a divisor of the batch size",
            )
        check_range("train.label_smoothing", self.label_smoothing, 0.0, 1.0)
        check_positive("train.z_loss", self.z_loss, allow_zero=True)
        for name in ("eval_every", "log_every", "checkpoint_every", "keep_checkpoints", "max_consecutive_skips"):
            check_positive(f"train.{name}", getattr(self, name))
        if self.eval_batches is not None:
            check_positive("train.eval_batches", self.eval_batches)
        if self.max_minutes is not None:
            check_positive("train.max_minutes", self.max_minutes)
        check_choice("train.nonfinite", self.nonfinite, NONFINITE_POLICIES, "non-finite policy")
        check_choice("train.best_mode", self.best_mode, BEST_MODES, "mode")
        check_positive("train.sample_every", self.sample_every, allow_zero=True)
        if self.profile is not None and self.profile_steps()[0] > self.steps:
            fail(
                "train.profile",
                self.profile,
                f"starts after the last step (train.steps={self.steps})",
                "profile steps the run reaches",
            )
        check_positive("train.sample_tokens", self.sample_tokens, allow_zero=True)
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from.strip()):
            fail("train.init_from", self.init_from, "must be a directory path", "or None to train from scratch")
        self._check_loggers()
        if self.lora is not None and self.init_from is None:
            fail(
                "train.lora",
                self.lora,
                "LoRA adapts pretrained weights, and train.init_from is None",
                "set train.init_from (train --init-from DIR) or turn LoRA off (train.lora=none)",
            )

    def _check_loggers(self) -> None:
        if not isinstance(self.loggers, tuple) or not all(isinstance(n, str) for n in self.loggers):
            fail("train.loggers", self.loggers, "must be a tuple of logger names", "e.g. ('jsonl', 'tensorboard')")
        for name in self.loggers:
            check_choice("train.loggers", name, LOGGERS)
        if len(set(self.loggers)) != len(self.loggers):
            fail("train.loggers", self.loggers, "names a logger twice", "list each logger once")
        if not isinstance(self.wandb_project, str) or not self.wandb_project.strip():
            fail("train.wandb_project", self.wandb_project, "must be a non-empty project name")
        if self.wandb_entity is not None and (not isinstance(self.wandb_entity, str) or not self.wandb_entity.strip()):
            fail("train.wandb_entity", self.wandb_entity, "must be a team or user name", "or None for your default")

    def profile_steps(self) -> tuple[int, int]:
        """(START, STOP) of ``profile="START:STOP"`` (1-based steps, inclusive)."""
        start, sep, stop = str(self.profile).partition(":")
        if not (sep and start.strip().isdigit() and stop.strip().isdigit() and 1 <= int(start) <= int(stop)):
            fail("train.profile", self.profile, "expected START:STOP with 1 <= START <= STOP", "e.g. 10:15")
        return int(start), int(stop)


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
                f"data.dataset={d.dataset!r} is a {d.task} task",
                f"use model.kind={task_kind!r} (or another dataset)",
            )
        longest = max(d.seq_len, d.max_src_len if d.task == "seq2seq" else 0)
        if m.position == "learned" and longest > m.max_len:
            fail(
                "data.seq_len",
                d.seq_len,
                f"is longer than model.max_len={m.max_len} (the learned position table)",
                "raise model.max_len or lower data.seq_len",
            )
        if self.train.optim.schedule == "inverse_sqrt" and self.train.optim.d_model not in (None, m.d_model):
            fail("train.optim.d_model", self.train.optim.d_model, f"differs from model.d_model={m.d_model}")


def resolve(cfg: Config) -> Config:
    """Fills values one section derives from another (e.g. the inverse-sqrt schedule's d_model)."""
    if cfg.train.optim.schedule == "inverse_sqrt" and cfg.train.optim.d_model is None:
        optim = dataclasses.replace(cfg.train.optim, d_model=cfg.model.d_model)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optim=optim))
    return cfg


__all__ = ["NONFINITE_POLICIES", "Config", "ConfigError", "TrainConfig", "resolve"]
