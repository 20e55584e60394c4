"""The trained arms of notebooks/norm_training.py (norm_placement's trained half): one base config,
arms by placement, depth, optimizer, learning rate, warmup length and steps, the warmup scan that
finds where deep Post-LN trains, and the tuning of an arm's LR and warmup.

Every arm is the base config (character-level Shakespeare, d_model 64, Xavier init without a
depth factor, unit-variance token embeddings, an untied output head) with the placement and depth
changed, Adam without weight decay or SGD with momentum 0.9, and no gradient clipping. Arm names
keep the form of the runs committed before this module (``"post L18 adam warmup lr=0.001"``), so
that those run summaries are reused (`store.run_arm`); a warmup other than the standard one is
named by its length (``"warmup 500"``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import pick
from transformer_jax.ablation.probes import trained_relative_change
from transformer_jax.ablation.protocol import lr_grid
from transformer_jax.ablation.runs import Curves, shakespeare_config
from transformer_jax.ablation.store import run_arm
from transformer_jax.ablation.tuning import dev_split, sweep_lr, with_lr, with_optim, with_steps
from transformer_jax.data import build_data
from transformer_jax.models import (
    AddKSmoothing,
    EmbeddingsConfig,
    InitConfig,
    NgramConfig,
    baseline_model_config,
    with_changes,
)
from transformer_jax.train.optim import Adam, Sgd


def base_config(notebook: str, steps: int) -> Any:
    """The shared config: Shakespeare characters, d_model 64 (32 in SMOKE mode), Xavier init, scaled
    unit-variance embeddings, separate output head, scanned layers; in FULL mode one validation pass,
    at the end."""
    full_only = pick(smoke={}, full={"eval": {"every": steps}})
    base = shakespeare_config(notebook, steps=steps, nonfinite="halt", **full_only)
    model = with_changes(
        base.model,
        d_model=pick(smoke=32, full=64),
        n_heads=pick(smoke=2, full=4),
        d_ff=pick(smoke=64, full=256),
        vocab_size=build_data(base.data, batch_size=1).vocab_size,
        init=InitConfig(scheme="xavier"),
        embeddings=EmbeddingsConfig(tie=False, scale=True),
        scan_layers=True,
    )
    return dataclasses.replace(base, model=model)


def unigram_floor(base: Any, notebook: str) -> dict[str, float]:
    """The loss of character frequencies alone (an add-k 1-gram of the training text) on the dev
    and the validation split: a model that uses no context ends there."""
    ngram = baseline_model_config(
        "ngram", NgramConfig(ngram_order=1, smoothing=AddKSmoothing()), vocab_size=base.model.dims.vocab_size
    )
    unigram = with_steps(dataclasses.replace(base, model=ngram), 1)
    return {
        "dev": run_arm(dev_split(unigram), "1-gram dev", 0, notebook).final_val,
        "val": run_arm(unigram, "1-gram", 0, notebook).final_val,
    }


@dataclasses.dataclass(frozen=True)
class Arms:
    """Arms of one notebook built from ``base``; ``warmup``: the standard warmup length (steps)."""

    base: Any
    notebook: str
    warmup: int

    def config(
        self,
        placement: str,
        depth: int,
        *,
        lr: float,
        optimizer: str = "adam",
        warmup: int | None = None,
        steps: int | None = None,
    ):
        """``base`` with ``placement`` at ``depth`` layers, ``optimizer`` at peak ``lr``, ``warmup``
        steps (None: the standard length; 0: none), no gradient clipping; ``steps`` training steps
        (None: the base's)."""
        model = with_changes(self.base.model, placement=placement, n_layers=depth)
        cfg = with_lr(dataclasses.replace(self.base, model=model), lr)
        settings = Sgd(momentum=0.9, weight_decay=0.0) if optimizer == "sgd" else Adam()
        w = self.warmup if warmup is None else warmup
        cfg = with_optim(cfg, optimizer=settings, warmup_steps=w, grad_clip=None)
        steps = self._steps(steps)
        return cfg if steps is None else with_steps(cfg, steps)

    def _steps(self, steps: int | None) -> int | None:
        """``steps``, or None where it is the base's length (one config, one name, one run key)."""
        return None if steps is None or int(steps) == self.base.train.steps else int(steps)

    def name(
        self, placement: str, depth: int, optimizer: str = "adam", warmup: int | None = None, steps: int | None = None
    ) -> str:
        """``"<placement> L<depth> <optimizer> warmup"`` (``"warmup <n>"``, ``"no warmup"``; then
        ``"<steps> steps"`` when not the base's)."""
        w = self.warmup if warmup is None else warmup
        what = "no warmup" if w == 0 else "warmup" if w == self.warmup else f"warmup {w}"
        steps = self._steps(steps)
        return f"{placement} L{depth} {optimizer} {what}" + ("" if steps is None else f" {steps} steps")

    def train(
        self,
        placement: str,
        depth: int,
        seeds: Sequence[int],
        *,
        lr: float,
        optimizer: str = "adam",
        warmup: int | None = None,
        steps: int | None = None,
        measure: Any = None,
    ) -> list[Curves]:
        """One run per seed of ``seeds`` (reused when this arm, seed and config already ran)."""
        cfg = self.config(placement, depth, lr=lr, optimizer=optimizer, warmup=warmup, steps=steps)
        name = f"{self.name(placement, depth, optimizer, warmup, steps)} lr={lr:.3g}"
        return [run_arm(cfg, name, s, self.notebook, measure=measure) for s in seeds]

    def dev_loss(self, placement: str, depth: int, *, lr: float, warmup: int | None = None, seed: int = 0) -> float:
        """The final dev-split loss of one Adam run (+inf when it diverged)."""
        cfg = dev_split(self.config(placement, depth, lr=lr, warmup=warmup))
        name = f"{self.name(placement, depth, 'adam', warmup)} lr={lr:.3g} dev"
        c = run_arm(cfg, name, seed, self.notebook)
        return math.inf if c.diverged else c.final_val


def warmup_scan(
    arms: Arms,
    depth: int,
    lrs: Sequence[float],
    warmups: Sequence[int],
    *,
    floor: float,
    margin: float,
    placement: str = "post",
    seed: int = 0,
) -> dict[str, Any]:
    """``placement`` at ``depth`` layers on the dev split at each learning rate x warmup length (one
    ``seed``). A cell *trains* when its dev loss ends more than ``margin`` below ``floor`` (the dev
    split's unigram loss). Returns ``{"cells": [{"lr", "warmup", "dev_loss", "trains"}], "pick"}``:
    the training cell of lowest dev loss, or None when no cell trains."""
    cells = []
    for lr in lrs:
        for w in warmups:
            loss = arms.dev_loss(placement, depth, lr=lr, warmup=w, seed=seed)
            cells.append({"lr": float(lr), "warmup": int(w), "dev_loss": loss, "trains": bool(loss < floor - margin)})
    trained = [c for c in cells if c["trains"]]
    return {"cells": cells, "pick": min(trained, key=lambda c: c["dev_loss"]) if trained else None}


def tuned(
    arms: Arms,
    placement: str,
    depth: int,
    grid: Sequence[float],
    warmups: Sequence[int | None],
    *,
    optimizer: str = "adam",
    steps: int | None = None,
    seeds: Sequence[int] = (0,),
) -> dict[str, Any]:
    """An arm's learning rate and warmup: `tuning.sweep_lr` over ``grid`` (mean dev loss over
    ``seeds``) at each warmup length, then the length whose pick has the lowest dev loss. Returns
    ``{"lr", "warmup", "dev_loss", "sweeps": {warmup: sweep record}}``."""
    sweeps = {}
    for w in warmups:
        cfg = arms.config(placement, depth, lr=grid[0], optimizer=optimizer, warmup=w, steps=steps)
        name = arms.name(placement, depth, optimizer, w, steps)
        sweeps[w] = sweep_lr(cfg, name, grid, arms.notebook, seeds=seeds)
    best = lambda w: min(sweeps[w]["dev_loss"])
    w = min(sweeps, key=best)
    return {"lr": sweeps[w]["lr"], "warmup": w, "dev_loss": best(w), "sweeps": {str(k): v for k, v in sweeps.items()}}


def plateau_steps(steps: Sequence[int], loss: Sequence[float], candidates: Sequence[int], gain: float) -> int:
    """The smallest of ``candidates`` at which the validation loss (``loss`` at ``steps``, linearly
    interpolated) gained less than ``gain`` over the last fifth of those steps (from 0.8 x it); the
    largest when none did."""
    at = lambda s: float(np.interp(s, steps, loss))
    for s in sorted(candidates):
        if at(0.8 * s) - at(s) < gain:
            return int(s)
    return int(max(candidates))


def evaluated_every(cfg: Any, every: int) -> Any:
    """``cfg`` validated every ``every`` steps."""
    return dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, eval=dataclasses.replace(cfg.train.eval, every=every))
    )


def deepest_training_scan(arms: Arms, depths: Sequence[int], lrs: Sequence[float], warmups: Sequence[int], **kw: Any):
    """`warmup_scan` at each of ``depths`` in turn (deepest first), stopping at the first depth where
    a cell trains. Returns ``{"scans": {depth: scan}, "depth", "pick"}`` (``depth`` and ``pick``
    None when no cell trains at any depth)."""
    scans: dict[int, dict[str, Any]] = {}
    for depth in depths:
        scans[depth] = warmup_scan(arms, depth, lrs, warmups, **kw)
        if scans[depth]["pick"] is not None:
            return {"scans": scans, "depth": depth, "pick": scans[depth]["pick"]}
    return {"scans": scans, "depth": None, "pick": None}


def relative_change(curves: Curves) -> dict[str, Any]:
    """A `store.run_arm` measure: ||x_{l+1} - x_l|| / ||x_l|| per layer of the trained checkpoint,
    on validation rows (`probes.trained_relative_change`)."""
    return {"relative_change": trained_relative_change(curves.workdir)}


def fixed_lr_arms(
    arms: Arms, placements: Sequence[str], depths: Sequence[int], lrs: Sequence[float], seeds: Sequence[int]
) -> dict[tuple[str, int, bool, float], list[Curves]]:
    """Each placement at each depth and fixed LR, with the standard warmup and without any, one run
    per seed: ``{(placement, depth, warmup?, lr): runs}``. The deepest runs at the first LR with
    warmup keep their trained checkpoint's `relative_change`."""
    return {
        (p, d, w, lr): arms.train(
            p,
            d,
            seeds,
            lr=lr,
            warmup=None if w else 0,
            measure=relative_change if (d, w, lr) == (max(depths), True, lrs[0]) else None,
        )
        for lr in lrs
        for p in placements
        for d in sorted(set(depths))
        for w in (True, False)
    }


def training_figure(warm: dict, deepnorm: Sequence[Curves], rel_change: dict, floor: float, depth: int, lr: float):
    """Train loss by step of Post-LN and Pre-LN (with and without warmup, at ``lr``) and DeepNorm at
    ``depth``, against the unigram loss ``floor``; and each placement's mean relative change by layer."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for i, p in enumerate(("post", "pre")):
        for w in (True, False):
            for j, c in enumerate(warm[p, depth, w, lr]):
                label = f"{p}{'' if w else ', no warmup'}" if j == 0 else None
                axes[0].plot(c.steps, c.train_loss, ls="-" if w else "--", color=f"C{i}", alpha=0.6, label=label)
    for j, c in enumerate(deepnorm):
        axes[0].plot(c.steps, c.train_loss, color="C2", alpha=0.6, label="deepnorm" if j == 0 else None)
    axes[0].axhline(floor, color="k", ls=":", label="unigram loss (validation)")
    axes[0].set(title=f"{depth} layers, Adam lr {lr:g} (one line per seed)", xlabel="step", ylabel="train loss")
    for p in (p for p in ("post", "pre") if rel_change.get(p)):
        r = np.mean(list(rel_change[p].values()), axis=0)
        axes[1].loglog(np.arange(1, len(r) + 1), r, "o-", ms=3, label=f"{p}, trained")
    axes[1].set(xlabel="layer l", ylabel="||x_{l+1} - x_l|| / ||x_l||", title="Relative change, trained checkpoints")
    for ax in axes:
        ax.legend(fontsize=8)
    return fig


def plateau_run(arms: Arms, placement: str, depth: int, lr: float, steps: int, every: int) -> Curves:
    """One Adam run of ``steps`` steps on the dev split (seed 0), validated every ``every`` steps."""
    cfg = evaluated_every(dev_split(arms.config(placement, depth, lr=lr, steps=steps)), every)
    return run_arm(cfg, f"{arms.name(placement, depth, steps=steps)} lr={lr:.3g} every {every} dev", 0, arms.notebook)


def best_to_plateau(
    arms: Arms,
    placements: Sequence[str],
    depth: int,
    grid: Sequence[float],
    warmups: Sequence[int],
    lengths: Sequence[int],
    every: int,
    gain: float = 0.02,
) -> dict[str, Any]:
    """Each placement's best setting at the length where the last placement's dev loss plateaus:
    its LR at the base length (`tuning.sweep_lr` over ``grid``), a dev run of the longest of
    ``lengths`` for the last placement at its LR, the first length whose last fifth gains less than
    ``gain`` (`plateau_steps`), and at that length each placement's LR (a 3-point grid around its
    base-length pick) and warmup (`tuned`). Returns ``{"short", "plateau", "steps", "best"}``."""
    short = {
        p: sweep_lr(arms.config(p, depth, lr=grid[0]), arms.name(p, depth), grid, arms.notebook) for p in placements
    }
    last = placements[-1]
    run = plateau_run(arms, last, depth, short[last]["lr"], max(lengths), every)
    steps = plateau_steps(run.val_steps, run.val_loss, lengths, gain)
    best = {p: tuned(arms, p, depth, lr_grid(short[p]["lr"]), warmups, steps=steps) for p in placements}
    plateau = {"placement": last, "lr": short[last]["lr"], "steps": run.val_steps, "dev_loss": run.val_loss}
    return {"short": short, "plateau": plateau, "steps": steps, "best": best}
