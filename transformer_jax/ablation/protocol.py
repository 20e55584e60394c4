"""The protocol of a comparison (issue 19): seeds per arm, per-seed records, rows of a verdict table
that show the interval and n, the learning-rate choice on a dev split, and what a committed FULL
result that predates the protocol may claim.

Every arm of a comparison between training setups runs ``seeds()`` seeds (the seed sets the
initialisation and the data order, `with_seed`); arms are paired by seed and compared with
`stats.paired`. results.json keeps every seed's numbers (`arm_record`) and every comparison's
record (`stats.Comparison.as_dict`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import (
    PENDING_RERUN,
    ResultsNotFoundError,
    missing_results_message,
    pick,
    results_root,
    smoke,
)
from transformer_jax.ablation.stats import Comparison, Values, combine, t_interval

PROTOCOL = "issue-19/v1"
"""Written into results.json by `save_results` when the results hold comparisons."""


def seeds(full: int = 3, smoke: int = 2, *, first: int = 0) -> tuple[int, ...]:
    """The seeds of every arm: ``full`` in FULL mode (at least 3), ``smoke`` in SMOKE mode (at
    least 2, so that a paired interval exists), counted from ``first`` (a rerun on fresh seeds
    starts past the seeds whose numbers were seen)."""
    if full < 3 or smoke < 2 or first < 0:
        raise ValueError(
            f"seeds(full={full}, smoke={smoke}, first={first}): the protocol needs >= 3 seeds (FULL), >= 2 (SMOKE), "
            "from a seed >= 0"
        )
    return tuple(range(first, first + pick(smoke=smoke, full=full)))


def with_seed(cfg: Any, seed: int) -> Any:
    """``cfg`` (a train `Config`) with ``train.seed`` (initialisation, dropout) and ``data.seed``
    (data order) set to ``seed``."""
    return dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, seed=seed), data=dataclasses.replace(cfg.data, seed=seed)
    )


def arm_record(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """``{"n", "seeds": [{"seed": s, ...numbers}], "mean": {key: mean over seeds}}`` for results.json;
    the mean is taken over the keys whose values are numbers in every seed."""
    rows = [{"seed": int(s), **dict(v)} for s, v in per_seed.items()]
    keys = [k for k in (rows[0] if rows else {}) if k != "seed"]
    numeric = [k for k in keys if all(isinstance(r.get(k), int | float) and not isinstance(r[k], bool) for r in rows)]
    return {"n": len(rows), "seeds": rows, "mean": {k: float(np.mean([r[k] for r in rows])) for k in numeric}}


def seed_values(record: Mapping[str, Any], key: str) -> list[float]:
    """The per-seed values of ``key`` in an `arm_record`, in seed order."""
    return [float(r[key]) for r in sorted(record["seeds"], key=lambda r: r["seed"])]


def mean_text(values: Values, digits: int = 3) -> str:
    """``1.234 +- 0.012 (n=3)``: the mean and the half-width of its 95% t interval."""
    mean, low, high = t_interval(values)
    half = (high - low) / 2
    return (
        f"{mean:.{digits}f} +- {half:.{digits}f} (n={len(values)})"
        if math.isfinite(half)
        else f"{mean:.{digits}f} (n=1)"
    )


def row(claim: str, measured: str, *parts: Comparison) -> tuple[str, str, str]:
    """A verdict-table row: ``measured`` (what was compared) followed by each part's interval
    (`Comparison.text`), and the verdict of the parts together (`stats.combine`)."""
    if not parts:
        raise ValueError(f"row {claim!r}: a verdict needs at least one comparison")
    text = "; ".join(p.text() for p in parts)
    return claim, f"{measured}: {text}" if measured else text, combine(*(p.verdict for p in parts))


def lr_grid(center: float, n: int = 3, factor: float = 3.0) -> list[float]:
    """``n`` learning rates on a log grid around ``center``, ``factor`` apart (3: 1/3, 1, 3 x center)."""
    if n < 2 or factor <= 1 or center <= 0:
        raise ValueError(f"lr_grid(center={center}, n={n}, factor={factor}): need center > 0, n >= 2, factor > 1")
    return [float(center * factor ** (i - (n - 1) / 2)) for i in range(n)]


def dev_means(dev_loss: Mapping[float, float | Sequence[float]]) -> list[float]:
    """The dev loss of each learning rate, in increasing order of rate: the mean over its seeds, +inf
    when any of them diverged (non-finite) or none ran."""
    means = []
    for lr in sorted(dev_loss):
        values = np.atleast_1d(np.asarray(dev_loss[lr], dtype=np.float64))
        means.append(float(np.mean(values)) if values.size and np.all(np.isfinite(values)) else math.inf)
    return means


def pick_lr(dev_loss: Mapping[float, float | Sequence[float]]) -> dict[str, Any]:
    """The learning rate of an arm: the argmin over the grid of the dev-split loss (the mean over
    seeds when a list is given; a diverged, non-finite run counts as +inf). Returns the record
    for results.json: ``grid``, ``dev_loss`` (per LR), ``lr`` (the choice) and ``at_edge`` (the
    choice is the smallest or largest LR tried, so the grid may not bracket the best one)."""
    if len(dev_loss) < 2:
        raise ValueError(f"pick_lr needs a sweep of at least 2 learning rates, got {sorted(dev_loss)}")
    grid = sorted(float(lr) for lr in dev_loss)
    losses = dev_means(dev_loss)
    if not any(math.isfinite(v) for v in losses):
        raise ValueError(f"every learning rate of the sweep {grid} diverged: widen the grid downwards")
    best = int(np.argmin(losses))
    return {"grid": grid, "dev_loss": losses, "lr": grid[best], "at_edge": best in (0, len(grid) - 1)}


def committed_note(notebook: str) -> str:
    """What the committed FULL ``experiments/results/<notebook>/results.json`` may claim: a
    result saved under the protocol is cited as is; one that predates it (no per-seed numbers, no
    intervals) is inconclusive by the protocol, whatever its table says; a notebook in
    `paths.PENDING_RERUN` says its redo is in progress. Every notebook prints it
    first, so FULL mode without a results root stops here (`paths.ResultsNotFoundError`)."""
    root = results_root()
    if root is None:
        if not smoke():
            raise ResultsNotFoundError(missing_results_message(notebook))
        return f"No committed result of {notebook} here: this is not a checkout."
    path = root / notebook / "results.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"No FULL result of {notebook} is committed yet."
    when = f"commit {str(record.get('git_commit'))[:12]}, {record.get('date', 'undated')}"
    redo = PENDING_RERUN.get(notebook)
    redo = f" It is the previous run's: a registered redo is in progress ({redo})." if redo else ""
    if record.get("mode") != "full":
        return f"The committed result of {notebook} ({when}) is not a FULL run.{redo}"
    if record.get("protocol") == PROTOCOL:
        return f"The committed FULL result of {notebook} ({when}) follows the protocol ({PROTOCOL}).{redo}"
    return (
        f"The committed FULL result of {notebook} ({when}) predates the protocol: every arm is one run "
        f"(n=1, no interval), so each of its verdicts is inconclusive by the protocol.{redo}"
    )
