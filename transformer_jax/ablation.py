"""Helpers for ablation notebooks (``notebooks/``): sizes by mode, training runs as curves,
results with provenance, verdict tables.

A notebook runs in FULL mode by default and in SMOKE mode (tiny sizes, a few steps, results
kept in a temporary folder) when the environment variable ``TRANSFORMER_JAX_SMOKE=1`` is set,
as it is in CI::

    from transformer_jax import ablation
    steps = ablation.pick(smoke=20, full=2000)
    curves = ablation.train_curves(cfg, "postln_nowarmup")
    ablation.save_results("norm_placement", {"final": ...}, figures={"loss": fig}, configs={...})
    print(ablation.verdict_table([("Pre-LN trains without warmup", "1.62 vs 1.60", "holds")]))
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from transformer_jax import configlib
from transformer_jax.train.config import Config

SMOKE_ENV = "TRANSFORMER_JAX_SMOKE"
REUSE_ENV = "TRANSFORMER_JAX_REUSE_RUNS"
VERDICTS = ("holds", "does not hold", "inconclusive")


def smoke() -> bool:
    """True when ``TRANSFORMER_JAX_SMOKE`` is set to 1 (CI's quick pass over every notebook)."""
    return _flag(SMOKE_ENV)


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


_smoke_mode = smoke  # `pick`'s keyword shadows the function


def pick(*, smoke: Any, full: Any) -> Any:
    """``smoke`` in SMOKE mode, else ``full``."""
    return smoke if _smoke_mode() else full


def repo_root() -> pathlib.Path:
    """The checkout this package was installed from (editable install), else the working directory."""
    here = pathlib.Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").is_file() else pathlib.Path.cwd()


_SMOKE_DIR: pathlib.Path | None = None


def results_dir(notebook: str) -> pathlib.Path:
    """``experiments/results/<notebook>/`` of the checkout (FULL), or a temporary folder (SMOKE,
    so that CI never touches committed results)."""
    global _SMOKE_DIR
    if smoke():
        if _SMOKE_DIR is None:
            _SMOKE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="tj_smoke_"))
        path = _SMOKE_DIR / notebook
    else:
        path = repo_root() / "experiments" / "results" / notebook
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir(notebook: str) -> pathlib.Path:
    """Where a notebook's training runs write checkpoints and logs (never committed)."""
    base = pathlib.Path(os.environ.get("TRANSFORMER_JAX_RUNS", tempfile.gettempdir())) / "transformer_jax_runs"
    path = base / ("smoke_" + notebook if smoke() else notebook)
    path.mkdir(parents=True, exist_ok=True)
    return path


def shakespeare_config(name: str, *, steps: int, model: Any = None, **train: Any) -> Config:
    """nanoGPT's character-level Shakespeare recipe (``experiments/shakespeare_char.py``: 4 layers,
    d_model 128, context 64, batch 12, AdamW 1e-3 cosine) with ``steps`` steps; in SMOKE mode a
    1-layer d_model 32 model, 5 warm-up steps and a few validation batches. ``model``: a
    ``ModelConfig`` to use instead; ``train``: `TrainConfig` fields to override."""
    from transformer_jax.data import DataConfig
    from transformer_jax.models import get_preset
    from transformer_jax.train.config import TrainConfig
    from transformer_jax.train.optim import OptimConfig

    if model is None:
        model = get_preset("nanogpt_char", max_len=64, dropout=0.0)
        if smoke():
            model = dataclasses.replace(model, d_model=32, n_heads=2, d_ff=64, n_layers=1)
    optim = OptimConfig(optimizer="adamw", lr=1e-3, schedule="cosine", warmup_steps=pick(smoke=5, full=100),
                        min_lr=1e-4, b1=0.9, b2=0.99, weight_decay=0.1, grad_clip=1.0)
    fields = dict(steps=steps, batch_size=12, eval_every=max(1, pick(smoke=steps // 2, full=250)),
                  eval_batches=pick(smoke=4, full=None), log_every=pick(smoke=5, full=25), checkpoint_every=steps,
                  sample_tokens=0, optim=optim)
    fields.update(train)
    return Config(name=name, model=model, data=DataConfig(dataset="shakespeare", tokenizer="char", seq_len=64),
                  train=TrainConfig(**fields))


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
    training); `save_results` then lists it under ``reused_runs``."""
    from transformer_jax.train.loop import NonFiniteError, train

    workdir = runs_dir(notebook) / name
    if _flag(REUSE_ENV) and (reused := _finished_run(cfg, workdir, name)) is not None:
        _REUSED[name] = reused.summary["reused_from"]
        return reused
    if fresh and workdir.exists():
        shutil.rmtree(workdir)
    t0 = time.time()
    try:
        summary = train(cfg, str(workdir))
    except NonFiniteError as err:
        summary = {"halted": True, "error": str(err), "wall_s": time.time() - t0}
    (workdir / SUMMARY_FILE).write_text(json.dumps({**summary, "git_commit": START_COMMIT}, default=str) + "\n")
    return read_curves(str(workdir), name, summary)


SUMMARY_FILE = "ablation_summary.json"
_REUSED: dict[str, str] = {}


def _finished_run(cfg: Config, workdir: pathlib.Path, name: str) -> Curves | None:
    """`Curves` of a finished run of exactly ``cfg`` in ``workdir``, else None."""
    try:
        saved = json.loads((workdir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    wanted = json.loads(json.dumps(configlib.to_dict(cfg)))
    for d in (saved, wanted):  # training sets the vocabulary size from the data, which is compared
        d.get("model", {}).pop("vocab_size", None)
    if saved != wanted:
        return None
    try:
        summary = json.loads((workdir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        summary = {}
    curves = read_curves(str(workdir), name, summary)
    if not summary.get("halted") and (not curves.steps or curves.steps[-1] < cfg.train.steps):
        return None
    mtime = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((workdir / "config.json").stat().st_mtime))
    curves.summary["reused_from"] = f"{workdir} (trained {mtime} UTC, commit {summary.get('git_commit', 'not recorded')})"
    return curves


def eval_loss(workdir: str, overrides: Sequence[str] = (), split: str = "val",
              max_batches: int | None = None) -> float:
    """Validation loss (nats per token) of a run's latest checkpoint, evaluated with ``--set``
    style ``overrides`` of its saved config (e.g. ``model.causal=true`` or a longer
    ``data.seq_len``); the parameters must still fit the changed model."""
    from transformer_jax.eval.perplexity import split_perplexity
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import setup

    run, _ = setup(workdir_config(workdir, list(overrides)), workdir)
    run.checkpoints.close()
    return split_perplexity(run, split, pick(smoke=4, full=max_batches))["loss"]


def git_commit() -> str | None:
    """The commit of the checkout (with ``-dirty`` when it has uncommitted changes), if any."""
    try:
        root = repo_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


START_COMMIT = git_commit()
"""The commit of the code this process imported (a later commit does not change what ran)."""


def config_dict(cfg: Any) -> Any:
    """A JSON-ready dict of a config dataclass (as saved in a run's config.json)."""
    return configlib.to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg


def save_results(notebook: str, results: dict[str, Any], *, figures: dict[str, Any] | None = None,
                 configs: dict[str, Any] | None = None, seed: int = 0) -> pathlib.Path:
    """Writes ``results.json`` (the figures' numbers, the exact configs, seed, git commit, mode,
    date) and one PNG per matplotlib figure into `results_dir`; returns the folder."""
    out = results_dir(notebook)
    record = {"notebook": notebook, "mode": "smoke" if smoke() else "full", "git_commit": START_COMMIT,
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed, "results": results,
              "configs": {k: config_dict(v) for k, v in (configs or {}).items()}}
    if _REUSED:
        record["reused_runs"] = dict(_REUSED)
    (out / "results.json").write_text(json.dumps(record, indent=1, default=_jsonable) + "\n")
    for name, fig in (figures or {}).items():
        fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    return out


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Curves):
        return dataclasses.asdict(value)
    return str(value)


def verdict(holds: bool | None) -> str:
    """``holds`` / ``does not hold`` / ``inconclusive`` (None)."""
    return VERDICTS[2] if holds is None else VERDICTS[0] if holds else VERDICTS[1]


def verdict_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """A Markdown table of (claim, what we measured, verdict) rows; verdicts from ``VERDICTS``."""
    for claim, _, v in rows:
        if v not in VERDICTS:
            raise ValueError(f"verdict {v!r} for {claim!r}: use one of {', '.join(VERDICTS)}")
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    lines = ["| claim | measured | verdict |", "| --- | --- | --- |"]
    lines += [f"| {cell(c)} | {cell(m)} | {v} |" for c, m, v in rows]
    return "\n".join(lines)


GALLERY_START, GALLERY_END = "<!-- gallery:start -->", "<!-- gallery:end -->"


def gallery_markdown(root: pathlib.Path | None = None) -> str:
    """The README gallery: for each ``experiments/results/<notebook>/results.json`` of a FULL run
    (sorted by name), a heading, its PNG figures and its verdict table, with commit and date."""
    root = repo_root() if root is None else root
    parts = []
    for path in sorted((root / "experiments" / "results").glob("*/results.json")):
        record = json.loads(path.read_text())
        if record.get("mode") != "full":
            continue
        folder = path.parent.relative_to(root).as_posix()
        figures = "\n".join(f"![{png.stem}]({folder}/{png.name})" for png in sorted(path.parent.glob("*.png")))
        parts.append(f"### {record['notebook']}\n\n{figures}\n\n{record['results'].get('verdicts', '')}\n\n"
                     f"`notebooks/{record['notebook']}.py`, FULL mode, commit {str(record.get('git_commit'))[:12]}, "
                     f"{record.get('date', '')}; numbers and configs in `{folder}/results.json`.")
    return "\n\n".join(parts) if parts else "(no FULL results committed yet)"


def update_readme_gallery(readme: pathlib.Path | None = None) -> bool:
    """Rewrites the part of README.md between the gallery markers from `gallery_markdown`;
    returns whether it changed."""
    readme = repo_root() / "README.md" if readme is None else readme
    text = readme.read_text()
    if GALLERY_START not in text or GALLERY_END not in text:
        raise ValueError(f"{readme} has no {GALLERY_START} ... {GALLERY_END} section to fill")
    head, rest = text.split(GALLERY_START, 1)
    _, tail = rest.split(GALLERY_END, 1)
    new = f"{head}{GALLERY_START}\n{gallery_markdown(readme.parent)}\n{GALLERY_END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


if __name__ == "__main__":
    print("README gallery", "updated" if update_readme_gallery() else "already up to date")
