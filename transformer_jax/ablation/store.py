"""Run summaries kept with the results, so a later sitting reuses finished runs on any machine.

Every run of a notebook (`run_arm`) leaves a small JSON file in ``runs_store(notebook)``:
``experiments/results/<notebook>/runs/`` in FULL mode (committed with the results), a temporary
folder in SMOKE mode. The file is named by the arm, the seed and a hash of the run's config
(`config_hash`), and holds the loss curves, the training summary (with the `machine` it trained
on), whatever ``measure`` read from the trained checkpoint, the config itself, the commit it was
trained from (where it began, for a run resumed after a stop: `runs.train_curves`) and the date. `run_arm` reads a
matching file back instead of training again; ``TRANSFORMER_JAX_RETRAIN=1`` trains every run
afresh. `kept_measurement` keeps a timing the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import platform
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

from transformer_jax.ablation import runs
from transformer_jax.ablation.paths import START_COMMIT, _flag, results_dir, smoke
from transformer_jax.core import configlib, migration
from transformer_jax.train.actions import UNFINISHED_STOPS

RETRAIN_ENV = "TRANSFORMER_JAX_RETRAIN"
RUNS_SUBDIR = "runs"


def machine() -> dict[str, Any]:
    """Where a run trained, kept in its summary so that speeds are only compared within one
    machine: the host name, how many CPUs the process could run on (1 when pinned with
    ``taskset``), and the 1-minute load average when it finished."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"host": platform.node(), "cpus": cpus, "load_1m": round(os.getloadavg()[0], 2)}


def runs_store(notebook: str) -> pathlib.Path:
    """``results_dir(notebook)/runs``: committed in FULL mode, temporary in SMOKE mode."""
    path = results_dir(notebook) / RUNS_SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def _file_digest(path: str) -> str:
    p = pathlib.Path(path)
    return "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else path


# Fields added after runs were committed, with the value every earlier run trained under: left out of
# the hash at that value, so a run from before the field existed keeps its key. One table for all.
ADDED_FIELDS: dict[str, Any] = {
    "model.mla": None,
    "model.mtp": None,
    "model.moe.first_dense": 0,
    "model.moe.routed_scaling_factor": 1.0,
    "data.mixture": None,
    "data.mixture_schedule": None,
    "mesh.context": 1,
}
# Added later too, and they never change a run's numbers (where metrics are sent): left out at any value.
ADDED_BOOKKEEPING = ("train.loggers", "train.wandb_entity", "train.wandb_project")


def _drop(d: dict[str, Any], dotted: str, *, only_if: Any = None, always: bool = False) -> None:
    """Removes the field at ``dotted`` from the nested dict ``d`` (if ``always``, or if it equals ``only_if``)."""
    *parents, name = dotted.split(".")
    for key in parents:
        d = d.get(key)  # type: ignore[assignment]
        if not isinstance(d, dict):
            return
    if name in d and (always or d[name] == only_if):
        del d[name]


def hashed_config(cfg: Any) -> dict[str, Any]:
    """The parts of ``cfg`` that decide a run's numbers: everything but ``name``, the model's
    ``vocab_size`` (training sets it from the data) and the fields added since runs were committed
    while at their old behaviour (`ADDED_FIELDS`, `ADDED_BOOKKEEPING`); local text files
    (``data.dataset.path``, ``val_path``) stand for their contents, so the hash is the same on every machine.
    Hashed in the layout the committed runs were saved in (`core.migration.legacy`)."""
    d = migration.legacy(json.loads(json.dumps(configlib.to_dict(cfg), default=str)))
    d.pop("name", None)
    d.get("model", {}).pop("vocab_size", None)
    for dotted, old in ADDED_FIELDS.items():
        _drop(d, dotted, only_if=old)
    for dotted in ADDED_BOOKKEEPING:
        _drop(d, dotted, always=True)
    data = d.get("data", {})
    for key in ("path", "val_path"):
        if isinstance(data.get(key), str):
            data[key] = ",".join(_file_digest(p) for p in data[key].split(","))
    return d


def config_hash(cfg: Any) -> str:
    """12 hex digits of the SHA-256 of `hashed_config` (sorted keys)."""
    text = json.dumps(hashed_config(cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def slug(text: str) -> str:
    """``text`` as a file-name part: letters, digits, ``.``, ``-`` and ``=`` kept, the rest ``_``."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_") or "run"


def run_key(arm: str, seed: int, cfg: Any) -> str:
    """``<arm>__s<seed>__<config hash>``: the file name (without ``.json``) of a run summary."""
    return f"{slug(arm)}__s{int(seed)}__{config_hash(cfg)}"


def _nan_to_none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def jsonable(value: Any) -> Any:
    """``value`` with arrays as (nested) lists, numpy scalars as Python numbers and non-finite
    floats as None (strict JSON)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _none_to_nan(values: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def save_run(notebook: str, arm: str, seed: int, cfg: Any, curves: runs.Curves, measured: Any = None) -> pathlib.Path:
    """Writes the summary of one finished run (see the module docstring); returns its path."""
    path = runs_store(notebook) / f"{run_key(arm, seed, cfg)}.json"
    record = {
        "arm": arm,
        "seed": int(seed),
        "config_hash": config_hash(cfg),
        "mode": "smoke" if smoke() else "full",
        "git_commit": curves.summary.get("git_commit") or START_COMMIT,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "curves": {
            "steps": curves.steps,
            "train_loss": _nan_to_none(curves.train_loss),
            "val_steps": curves.val_steps,
            "val_loss": _nan_to_none(curves.val_loss),
        },
        "summary": jsonable({k: v for k, v in curves.summary.items() if k not in ("measured", "reused_from")}),
        "measured": jsonable(measured),
        "config": configlib.to_dict(cfg),
    }
    path.write_text(json.dumps(record, indent=1, default=str, allow_nan=False) + "\n")
    return path


def load_run(notebook: str, arm: str, seed: int, cfg: Any) -> runs.Curves | None:
    """The `runs.Curves` of a saved run of exactly this arm, seed and config, else None; its
    ``summary`` holds ``measured`` and ``reused_from`` (the file, commit and date)."""
    path = runs_store(notebook) / f"{run_key(arm, seed, cfg)}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (stopped := record.get("summary", {}).get("stopped")) in UNFINISHED_STOPS:
        warnings.warn(f"{path} is a run stopped early ({stopped}); training it again", stacklevel=2)
        return None
    c = record["curves"]
    summary = {
        **record.get("summary", {}),
        "measured": record.get("measured"),
        "reused_from": f"{path.name} (trained {record.get('date')}, commit {record.get('git_commit')})",
    }
    return runs.Curves(
        f"{arm} s{seed}",
        list(c["steps"]),
        _none_to_nan(c["train_loss"]),
        list(c["val_steps"]),
        _none_to_nan(c["val_loss"]),
        summary,
        "",
    )


def run_arm(
    cfg: Any,
    arm: str,
    seed: int,
    notebook: str,
    *,
    measure: Callable[[runs.Curves], Any] | None = None,
) -> runs.Curves:
    """One seed of one arm: ``cfg`` with ``seed`` (`protocol.with_seed`) trained by
    `runs.train_curves`, its summary saved (`save_run`), or read back (`load_run`) when this
    arm, seed and config already ran (and holds ``measure``'s numbers when one is given) and
    ``TRANSFORMER_JAX_RETRAIN`` is not set. ``measure``
    (called with the finished run's `runs.Curves`, whose ``workdir`` holds the last checkpoint;
    not called for a diverged run) returns JSON-ready numbers read from the trained model,
    saved with the run and returned in ``summary["measured"]``."""
    from transformer_jax.ablation.protocol import with_seed

    cfg = with_seed(cfg, seed)
    done = None if _flag(RETRAIN_ENV) else load_run(notebook, arm, seed, cfg)
    if done is not None and (measure is None or done.diverged or done.summary["measured"] is not None):
        runs._REUSED[f"{arm} s{seed}"] = done.summary["reused_from"]
        runs._WALL_S[f"{arm} s{seed}"] = float(done.summary.get("wall_s") or 0.0)
        return done
    curves = runs.train_curves(cfg, run_key(arm, seed, cfg), notebook)
    curves.summary["machine"] = machine()
    measured = None if measure is None or curves.diverged else measure(curves)
    save_run(notebook, arm, seed, cfg, curves, measured)
    curves.summary["measured"] = jsonable(measured)
    runs._WALL_S[f"{arm} s{seed}"] = float(curves.summary.get("wall_s") or 0.0)
    return curves


def kept_measurement(notebook: str, name: str, key: Any, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A measurement that needs a quiet machine (a timing), taken once and kept beside the run
    summaries: ``measure()``'s dict with ``machine``, ``date`` and ``git_commit`` added, saved as
    ``runs_store(notebook)/<name>__<hash of key>.json`` (``key``: JSON-able, everything that decides
    the numbers) and read back, with ``reused_from``, by a later sitting on any machine
    (``TRANSFORMER_JAX_RETRAIN=1`` measures again). Measure with nothing else computing."""
    digest = hashlib.sha256(json.dumps(jsonable(key), sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = runs_store(notebook) / f"{slug(name)}__{digest}.json"
    if not _flag(RETRAIN_ENV) and path.is_file():
        record = json.loads(path.read_text())
        return {
            **record,
            "reused_from": f"{path.name} (measured {record.get('date')}, commit {record.get('git_commit')})",
        }
    record = {
        **jsonable(measure()),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "git_commit": START_COMMIT,
    }
    path.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
    return record
