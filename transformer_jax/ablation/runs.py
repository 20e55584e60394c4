"""Training runs of a notebook: the Shakespeare recipe, runs as loss curves, reuse of finished runs."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
import time
from collections.abc import Sequence
from typing import Any

from transformer_jax.ablation.paths import REUSE_ENV, START_COMMIT, _flag, pick, runs_dir, same_library, smoke
from transformer_jax.core import configlib, migration
from transformer_jax.train.actions import UNFINISHED_STOPS
from transformer_jax.train.config import Config, resolve


def recipe_optim(weight_decay: float) -> Any:
    """nanoGPT's optimizer: AdamW (0.9, 0.99) at 1e-3, cosine to 1e-4 after 100 warm-up steps (5 in
    SMOKE mode), gradients clipped at norm 1."""
    from transformer_jax.train.optim import AdamW, CosineSchedule, OptimConfig

    return OptimConfig(
        optimizer=AdamW(b1=0.9, b2=0.99, weight_decay=weight_decay),
        lr=1e-3,
        schedule=CosineSchedule(min_lr=1e-4),
        warmup_steps=pick(smoke=5, full=100),
        grad_clip=1.0,
    )


def shakespeare_config(name: str, *, steps: int, model: Any = None, **train: Any) -> Config:
    """nanoGPT's character-level Shakespeare recipe (``experiments/shakespeare_char.py``: 4 layers,
    d_model 128, context 64, batch 12, AdamW 1e-3 cosine) with ``steps`` steps; in SMOKE mode a
    1-layer d_model 32 model, 5 warm-up steps and a few validation batches. ``model``: a
    ``ModelConfig`` to use instead; ``train``: `TrainConfig` fields to override, a dict setting some
    fields of a group (``eval={"every": 500}``)."""
    from transformer_jax.data import CharSettings, DataConfig, ShakespeareData
    from transformer_jax.models import get_preset, with_changes
    from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig, SampleConfig
    from transformer_jax.train.config import TrainConfig

    if model is None:
        model = get_preset("nanogpt_char", max_len=64, dropout=0.0)
        if smoke():
            model = with_changes(model, d_model=32, n_heads=2, d_ff=64, n_layers=1)
    optim = recipe_optim(weight_decay=0.1)
    fields: dict[str, Any] = dict(
        steps=steps,
        batch_size=12,
        eval=EvalConfig(every=max(1, pick(smoke=steps // 2, full=250)), batches=pick(smoke=4, full=None)),
        log=LogConfig(every=pick(smoke=5, full=25)),
        checkpoint=CheckpointConfig(every=steps),
        sample=SampleConfig(tokens=0),
        optim=optim,
    )
    for key, value in train.items():
        group = isinstance(value, dict) and dataclasses.is_dataclass(fields.get(key))
        fields[key] = dataclasses.replace(fields[key], **value) if group else value
    return Config(
        name=name,
        model=model,
        data=DataConfig(dataset=ShakespeareData(tokenizer=CharSettings()), seq_len=64),
        train=TrainConfig(**fields),
    )


@dataclasses.dataclass
class Curves:
    """One training run: train loss by step, validation loss by step, the final summary."""

    name: str
    steps: list[int]
    train_loss: list[float]
    val_steps: list[int]
    val_loss: list[float]
    summary: dict[str, Any]
    workdir: str

    @property
    def final_val(self) -> float:
        return self.val_loss[-1] if self.val_loss else math.nan

    def final_or(self, ceiling: float) -> float:
        """The final validation loss, or ``ceiling`` for a diverged run (e.g. ln V, the loss of the
        uniform predictor: a run that diverged predicts no better), so that seeds can be compared."""
        return ceiling if self.diverged else self.final_val

    @property
    def diverged(self) -> bool:
        """A non-finite or exploded final loss, or training halted on non-finite values."""
        last = self.train_loss[-1] if self.train_loss else math.nan
        return not math.isfinite(last) or not math.isfinite(self.final_val) or bool(self.summary.get("halted"))


def read_curves(workdir: str, name: str = "", summary: dict | None = None) -> Curves:
    """`Curves` from the ``metrics.jsonl`` of a training run."""
    from transformer_jax.train.metrics import read_metrics

    steps, train, val_steps, val = [], [], [], []
    for rec in read_metrics(workdir):
        if "train/loss" in rec:
            steps.append(rec["step"])
            train.append(float(rec["train/loss"]))
        if "val/loss" in rec:
            val_steps.append(rec["step"])
            val.append(float(rec["val/loss"]))
    return Curves(name or os.path.basename(workdir), steps, train, val_steps, val, summary or {}, workdir)


def train_curves(cfg: Config, name: str, notebook: str = "ablation", *, fresh: bool = True) -> Curves:
    """Trains ``cfg`` from scratch in ``runs_dir(notebook)/name`` (removed first when ``fresh``)
    and returns its `Curves`. A run that stops on non-finite losses (``train.nonfinite``) is
    returned with ``summary["halted"]`` and its message instead of raising: divergence is a
    result here.

    With ``TRANSFORMER_JAX_REUSE_RUNS=1`` a finished run already in that folder is read back
    instead of retrained, but only when its saved ``config.json`` equals ``cfg`` and its metrics
    reach ``cfg.train.steps`` (re-running a notebook's analysis after a change that does not touch
    training); `save_results` then lists it under ``reused_runs``. A run stopped early there
    (a signal, ``train.max_minutes``) resumes from its last checkpoint instead of starting over
    when `_resume_point` allows (the same config and library code: exact resume gives the
    uninterrupted run). The summary's ``git_commit`` is the commit the run began from (for a run
    read back, the one that trained it), with ``resumed`` when it resumed."""
    from transformer_jax.train.actions import NonFiniteError
    from transformer_jax.train.loop import train

    workdir = runs_dir(notebook) / name
    reuse = _flag(REUSE_ENV)
    if reuse and (reused := _finished_run(cfg, workdir, name)) is not None:
        _REUSED[name] = reused.summary["reused_from"]
        return reused
    started = _resume_point(cfg, workdir) if reuse else None
    resumed = None
    if started is None:
        if fresh and workdir.exists():
            shutil.rmtree(workdir)
        started = {"git_commit": START_COMMIT, "date": _now(), "wall_s": 0.0}
    else:
        resumed = {"begun": started["date"], "begun_commit": started["git_commit"]}
        resumed |= {"from_step": _last_checkpoint(workdir), "commit": START_COMMIT, "date": _now()}
        print(f"{name}: resuming at step {resumed['from_step']} the run begun {started['date']} from commit "
              f"{str(started['git_commit'])[:12]} (same config and library code)", flush=True)  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / STARTED_FILE).write_text(json.dumps(started) + "\n")
    t0 = time.time()
    try:
        summary = train(cfg, str(workdir))
    except NonFiniteError as err:
        summary = {"halted": True, "error": str(err), "wall_s": time.time() - t0}
    summary["wall_s"] = float(started["wall_s"]) + float(summary.get("wall_s") or time.time() - t0)
    if summary.get("stopped") in UNFINISHED_STOPS:
        (workdir / STARTED_FILE).write_text(json.dumps({**started, "wall_s": summary["wall_s"]}) + "\n")
        raise SystemExit(
            f"run {name} stopped early ({summary['stopped']} at step {summary.get('step')} of {cfg.train.steps}): "
            f"not recorded as a finished run; rerun the notebook to train it again (with {REUSE_ENV}=1 it "
            "resumes from its last checkpoint)"
        )
    if resumed is not None:
        summary["resumed"] = resumed
    summary["git_commit"] = started["git_commit"]
    (workdir / SUMMARY_FILE).write_text(json.dumps(summary, default=str) + "\n")
    return read_curves(str(workdir), name, summary)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _last_checkpoint(workdir: pathlib.Path) -> int | None:
    """The latest step saved under ``workdir/checkpoints`` (None when there is none)."""
    steps = [int(p.name) for p in (workdir / "checkpoints").glob("*") if p.name.isdigit()]
    return max(steps, default=None)


def _resume_point(cfg: Config, workdir: pathlib.Path) -> dict[str, Any] | None:
    """The start record (``git_commit``, ``date``, ``wall_s`` so far) of an unfinished run of exactly
    ``cfg`` in ``workdir`` that may resume: a checkpoint saved, begun from a committed tree whose
    ``transformer_jax/`` is the one this process runs (`START_COMMIT`, clean; `paths.same_library`);
    else None (train afresh)."""
    try:
        started = json.loads((workdir / STARTED_FILE).read_text())
    except (OSError, ValueError):
        return None
    begun, now = str(started.get("git_commit") or ""), str(START_COMMIT or "")
    committed = all(c and not c.endswith("-dirty") for c in (begun, now))
    if not committed or _last_checkpoint(workdir) is None or not _same_config(cfg, workdir):
        return None
    return started if same_library(begun, now) else None


SUMMARY_FILE = "ablation_summary.json"
STARTED_FILE = "ablation_started.json"
_REUSED: dict[str, str] = {}
_WALL_S: dict[str, float] = {}
"""Training wall-clock (s) of each run this process used through `store.run_arm`, trained now or read back."""


def _same_config(cfg: Config, workdir: pathlib.Path) -> bool:
    """Whether ``workdir/config.json`` (upgraded to the current layout) is ``cfg`` as training saves
    it (`train.config.resolve`: e.g. the inverse-sqrt schedule's ``d_model`` filled in)."""
    try:
        saved = migration.upgrade(json.loads((workdir / "config.json").read_text()))
    except (OSError, ValueError):
        return False
    wanted = json.loads(json.dumps(configlib.to_dict(resolve(cfg))))
    for d in (saved, wanted):  # training sets the vocabulary size from the data, which is compared
        d.get("model", {}).get("dims", {}).pop("vocab_size", None)
    return saved == wanted


def _finished_run(cfg: Config, workdir: pathlib.Path, name: str) -> Curves | None:
    """`Curves` of a finished run of exactly ``cfg`` in ``workdir``, else None."""
    if not _same_config(cfg, workdir):
        return None
    try:
        summary = json.loads((workdir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        summary = {}
    curves = read_curves(str(workdir), name, summary)
    if not summary.get("halted") and (not curves.steps or curves.steps[-1] < cfg.train.steps):
        return None
    mtime = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((workdir / "config.json").stat().st_mtime))
    curves.summary["reused_from"] = (
        f"{workdir} (trained {mtime} UTC, commit {summary.get('git_commit', 'not recorded')})"
    )
    return curves


def eval_loss(workdir: str, overrides: Sequence[str] = (), split: str = "val", max_batches: int | None = None) -> float:
    """Validation loss (nats per token) of a run's latest checkpoint, evaluated with ``--set``
    style ``overrides`` of its saved config (e.g. ``model.attention.causal=true`` or a longer
    ``data.seq_len``); the parameters must still fit the changed model."""
    from transformer_jax.eval.perplexity import split_perplexity
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(workdir_config(workdir, list(overrides)), workdir)
    run.checkpoints.close()
    return split_perplexity(run, split, pick(smoke=4, full=max_batches))["loss"]
