"""Tuning an arm without touching the scored split, and budgets of equal wall-clock.

- `dev_split`: a config that trains on the first 90% of the training split's characters and
  validates on the last 10% (the dev split), so the validation split stays the test set. A
  synthetic task generates its examples from ``data.seed``: its dev data are those of seeds from
  `DEV_SEED` up, which no scored run uses.
- `sweep_lr`: an arm's learning rate from a small log grid, each run scored on the dev split
  (`protocol.pick_lr`), the grid grown past its edge while the best rate sits there.
- `tuned_runs`: an arm's sweep, then its scored seeds at the chosen rate.
- `time_steps` / `steps_for_seconds`: seconds per training step of several models, timed side by
  side in alternating rounds (kept with the run summaries), and the steps a model gets in a
  wall-clock budget.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import pick, runs_dir
from transformer_jax.ablation.protocol import dev_means, pick_lr
from transformer_jax.ablation.store import hashed_config, kept_measurement, run_arm
from transformer_jax.data.config import SyntheticData
from transformer_jax.train.optim_config import CosineSchedule, LinearSchedule

DEV_SEED = 1000
"""The first seed of a synthetic task's dev data (scored runs use `protocol.seeds`: 0 .. n-1)."""


def dev_split(cfg: Any, fraction: float = 0.1) -> Any:
    """``cfg`` training on the first ``1 - fraction`` of the characters of its training split and
    validating on the rest (``data.dataset=text`` over two files written once under
    `paths.runs_dir`, named by the text's hash). The tokenizer is fitted on the shorter training
    text, as for any ``text`` corpus; the settings the two datasets share (tokenizer, packing, ...) are kept."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction={fraction}: the dev split is a fraction of the training text, in (0, 1)")
    text = _training_text(cfg.data)
    cut = int(len(text) * (1.0 - fraction))
    if cut < 1 or cut >= len(text):
        raise ValueError(f"the training split has {len(text)} characters: too few to carve a dev split of {fraction}")
    digest = hashlib.sha256(f"{fraction}\0{text}".encode()).hexdigest()[:16]
    folder = runs_dir("dev_splits") / digest
    files = {"train": folder / "train.txt", "dev": folder / "dev.txt"}
    if not all(f.is_file() for f in files.values()):
        folder.mkdir(parents=True, exist_ok=True)
        for name, part in (("train", text[:cut]), ("dev", text[cut:])):
            tmp = files[name].with_suffix(".tmp")
            tmp.write_text(part, encoding="utf-8")
            tmp.replace(files[name])
    from transformer_jax.data.config import TextData

    kept = {
        f.name: getattr(cfg.data.dataset, f.name)
        for f in dataclasses.fields(TextData)
        if hasattr(cfg.data.dataset, f.name)
    }
    text_data = TextData(**{**kept, "path": str(files["train"]), "val_path": str(files["dev"])})
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=text_data))


@functools.lru_cache(maxsize=4)
def _training_text(data: Any) -> str:
    from transformer_jax.data.sources import load_corpus

    return load_corpus(data).text("train")


def with_optim(cfg: Any, **fields: Any) -> Any:
    """``cfg`` with ``train.optim`` fields replaced."""
    optim = dataclasses.replace(cfg.train.optim, **fields)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optim=optim))


def with_lr(cfg: Any, lr: float) -> Any:
    """``cfg`` with peak learning rate ``lr`` and, for a schedule with a floor, ``min_lr = lr / 10``."""
    schedule = cfg.train.optim.schedule
    if isinstance(schedule, CosineSchedule | LinearSchedule):
        schedule = dataclasses.replace(schedule, min_lr=float(lr) / 10)
    return with_optim(cfg, lr=float(lr), schedule=schedule)


def with_steps(cfg: Any, steps: int) -> Any:
    """``cfg`` trained ``steps`` steps (evaluated and checkpointed at the end as well)."""
    train = cfg.train
    fields: dict[str, Any] = {
        "steps": int(steps),
        "checkpoint": dataclasses.replace(train.checkpoint, every=int(steps)),
    }
    if train.eval.every > steps:
        fields["eval"] = dataclasses.replace(train.eval, every=int(steps))
    return dataclasses.replace(cfg, train=dataclasses.replace(train, **fields))


def sweep_lr(
    cfg: Any,
    arm: str,
    grid: Sequence[float],
    notebook: str,
    *,
    seeds: Sequence[int] = (0,),
    fraction: float = 0.1,
    extend: int | None = None,
) -> dict[str, Any]:
    """Trains ``cfg`` at each learning rate of ``grid`` (`with_lr`) on the dev split
    (`dev_split`), each seed of ``seeds`` through `store.run_arm` (arm ``"<arm> lr=<lr> dev"``),
    and returns `protocol.pick_lr`'s record of the final dev losses (a diverged run counts as
    +inf), with ``arm`` and ``seeds``. While the best rate is the grid's smallest or largest, the
    grid grows one step past it (the ratio of its two outermost rates on that side), at most
    ``extend`` times (default 2 in FULL mode, 0 in SMOKE mode, which only checks that a notebook
    runs): a pick left at the edge after that keeps ``at_edge`` True. A grid at which every rate
    diverged grows downwards the same way (still all diverged after that: `pick_lr`'s error). A
    synthetic task's dev data are the examples of ``seeds`` themselves, which must be `DEV_SEED` or
    above."""
    steps: int = pick(smoke=0, full=2) if extend is None else extend
    if steps < 0:
        raise ValueError(f"extend={extend}: the number of grid extensions must be >= 0")
    if isinstance(cfg.data.dataset, SyntheticData):
        if min(seeds) < DEV_SEED:
            raise ValueError(
                f"seeds={tuple(seeds)}: a synthetic task's examples come from the seed, and seeds below "
                f"{DEV_SEED} are scored; sweep on seeds >= {DEV_SEED} (ablation.DEV_SEED)"
            )
        dev = cfg
    else:
        dev = dev_split(cfg, fraction)
    losses: dict[float, list[float]] = {}

    def score(lr: float) -> None:
        runs = [run_arm(with_lr(dev, lr), f"{arm} lr={lr:.3g} dev", s, notebook) for s in seeds]
        losses[float(lr)] = [math.inf if c.diverged else c.final_val for c in runs]

    for lr in grid:
        score(lr)
    for _ in range(steps):
        rates = sorted(losses)
        if not any(math.isfinite(v) for v in dev_means(losses)):
            score(rates[0] * rates[0] / rates[1])  # every rate diverged: the best lies below the grid
            continue
        best = pick_lr(losses)
        if not best["at_edge"]:
            break
        up = best["lr"] == rates[-1]
        score(rates[-1] * rates[-1] / rates[-2] if up else rates[0] * rates[0] / rates[1])
    return {"arm": arm, "seeds": [int(s) for s in seeds], **pick_lr(losses)}


def tuned_runs(
    cfg: Any,
    arm: str,
    grid: Sequence[float],
    notebook: str,
    seeds: Sequence[int],
    *,
    sweep_seeds: Sequence[int] = (DEV_SEED,),
    extend: int | None = None,
    measure: Callable[[Any], Any] | None = None,
) -> tuple[dict[str, Any], Any, list[Any]]:
    """One arm tuned then run: `sweep_lr` over ``grid`` on ``sweep_seeds``, then `store.run_arm` at
    the chosen rate for each of ``seeds`` (with ``measure``, if given). Returns (the sweep's record,
    the tuned config, the runs' `Curves`)."""
    sweep = sweep_lr(cfg, arm, grid, notebook, seeds=sweep_seeds, extend=extend)
    tuned = with_lr(cfg, sweep["lr"])
    return sweep, tuned, [run_arm(tuned, arm, s, notebook, measure=measure) for s in seeds]


def time_steps(
    configs: Mapping[str, Any], notebook: str, *, rounds: int = 7, steps: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """Seconds per training step of each config, timed side by side in alternating rounds
    (`train.timing.step_seconds_by_round`): ``{"rounds": {name: [s per step, one per round]},
    "seconds_per_step": {name: median over rounds}, "rounds_n", "steps"}`` and the machine, kept
    with the run summaries (`store.kept_measurement`): run the sitting that times on a quiet
    machine. Rounds pair up, so per-round ratios give an interval."""
    from transformer_jax.train.timing import step_seconds_by_round

    def measure() -> dict[str, Any]:
        by_round = step_seconds_by_round(configs, rounds=rounds, steps=steps, warmup=warmup)
        per_step = {n: float(np.median(v)) for n, v in by_round.items()}
        return {"rounds": by_round, "seconds_per_step": per_step, "rounds_n": rounds, "steps": steps}

    key = {"configs": {n: hashed_config(c) for n, c in configs.items()}, "rounds": rounds, "steps": steps}
    return kept_measurement(notebook, "timing", key, measure)


def steps_for_seconds(budget_s: float, seconds_per_step: float, *, minimum: int = 1) -> int:
    """The whole number of steps that fit in ``budget_s`` seconds (at least ``minimum``)."""
    if not budget_s > 0 or not seconds_per_step > 0:
        raise ValueError(f"budget_s={budget_s} and seconds_per_step={seconds_per_step} must be positive")
    return max(int(minimum), round(budget_s / seconds_per_step))
