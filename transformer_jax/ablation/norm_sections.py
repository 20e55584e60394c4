"""The sections of notebooks/norm_training.py: each trains its arms through `norm_trained.Arms` (so
every run keeps the name and config it had when the notebook held these loops, and committed run
summaries are reused) and returns their final validation losses, a diverged run counting as
``ceiling`` (ln V); one function per claim builds its verdict row's comparisons, and `record`
gathers what the notebook's results.json keeps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.norm_trained import Arms, best_to_plateau, tuned
from transformer_jax.ablation.protocol import arm_record, lr_grid
from transformer_jax.ablation.runs import Curves
from transformer_jax.ablation.stats import Comparison, linear_fit, paired

Warm = Mapping[tuple[str, int, bool, float], Sequence[Curves]]
"""`norm_trained.fixed_lr_arms`: ``{(placement, depth, warmup?, lr): runs}``."""


def finals(runs: Sequence[Curves], ceiling: float) -> list[float]:
    """Each run's final validation loss (``ceiling`` for one that diverged)."""
    return [c.final_or(ceiling) for c in runs]


def relative_changes(
    warm: Warm, depth: int, lr: float, seeds: Sequence[int], placements: Sequence[str] = ("post", "pre")
) -> dict[str, dict[int, np.ndarray]]:
    """Per placement (of ``placements``) and seed (of ``seeds``, the runs' order), ||x_{l+1} - x_l|| /
    ||x_l|| by layer, shape (depth,), of each trained checkpoint at ``depth`` layers and ``lr`` with
    warmup; a diverged run has none to probe, so its seed is left out."""
    runs = lambda p: zip(seeds, warm[p, depth, True, lr], strict=True)
    return {
        p: {int(s): np.asarray(c.summary["measured"]["relative_change"]) for s, c in runs(p) if not c.diverged}
        for p in placements
    }


def scan_lines(scans: Mapping[str, Any]) -> str:
    """One line per cell of `norm_trained.deepest_training_scan`'s scans."""
    return "\n".join(
        f"L{depth} lr {c['lr']:g}, warmup {c['warmup']}: dev loss {c['dev_loss']:.3f}" + " (trains)" * c["trains"]
        for depth, scan in scans["scans"].items()
        for c in scan["cells"]
    )


def with_and_without_warmup(
    arms: Arms, depth: int, point: Mapping[str, Any] | None, seeds: Sequence[int], ceiling: float
) -> dict[str, list[float]]:
    """Post-LN at ``depth`` layers at the scan's ``point`` (its lr and warmup) and at that lr without
    warmup, one run per seed: ``{"warmup": losses, "no warmup": losses}`` (empty when no point)."""
    if point is None:
        return {"warmup": [], "no warmup": []}
    return {
        key: finals(arms.train("post", depth, seeds, lr=point["lr"], warmup=w), ceiling)
        for key, w in (("warmup", point["warmup"]), ("no warmup", 0))
    }


def post_vs_pre(
    arms: Arms,
    depth: int,
    grid: Sequence[float],
    warmups: Sequence[int],
    lengths: Sequence[int],
    every: int,
    seeds: Sequence[int],
    ceiling: float,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """`norm_trained.best_to_plateau` for Post-LN and Pre-LN at ``depth`` layers, then each placement
    at its best LR and warmup for the plateau's steps, one run per seed. Returns (the plateau
    record, ``{placement: losses}``)."""
    to_plateau = best_to_plateau(arms, ("post", "pre"), depth, grid, warmups, lengths, every)
    losses = {
        p: finals(arms.train(p, depth, seeds, lr=b["lr"], warmup=b["warmup"], steps=to_plateau["steps"]), ceiling)
        for p, b in to_plateau["best"].items()
    }
    return to_plateau, losses


def adam_vs_sgd(
    arms: Arms,
    depth: int,
    centers: Mapping[str, float],
    warmup: int,
    dev_seeds: Sequence[int],
    seeds: Sequence[int],
    ceiling: float,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each placement with each optimizer at ``depth`` layers and ``warmup`` steps, its LR picked on
    the dev split by the mean over ``dev_seeds`` (a 3-point grid around ``centers[optimizer]``), then
    one run per seed: ``{(placement, optimizer): {**`norm_trained.tuned` record, "final": losses}}``."""
    out = {}
    for p in ("post", "pre"):
        for o in ("adam", "sgd"):
            t = tuned(arms, p, depth, lr_grid(centers[o]), (warmup,), optimizer=o, seeds=dev_seeds)
            runs = arms.train(p, depth, seeds, lr=t["lr"], optimizer=o, warmup=warmup)
            out[p, o] = {**t, "final": finals(runs, ceiling)}
    return out


def deepnorm_rescue(
    arms: Arms,
    depth: int,
    grid: Sequence[float],
    *,
    floor: float,
    margin: float,
    seeds: Sequence[int],
    ceiling: float,
) -> tuple[dict[str, Any], dict[str, list[Curves]]]:
    """Post-LN with warmup at ``depth`` layers on the dev split at each LR of ``grid`` (seed 0); at the
    smallest where it fails (diverges or ends within ``margin`` of ``floor``) Post-LN and DeepNorm,
    one run per seed. Returns (``{"lr", "post_fails_in_sweep", "sweep", "post", "deepnorm"}`` with
    their losses, empty where nothing fails; ``{placement: runs}``)."""
    sweep = {"grid": list(grid), "dev_loss": [arms.dev_loss("post", depth, lr=lr) for lr in grid]}
    fails = [not loss < floor - margin for loss in sweep["dev_loss"]]
    lr = grid[fails.index(True)] if any(fails) else grid[-1]
    runs = {p: arms.train(p, depth, seeds, lr=lr) for p in ("post", "deepnorm")} if any(fails) else {}
    rescue = {"lr": lr, "post_fails_in_sweep": any(fails), "sweep": sweep, "post": [], "deepnorm": []}
    return {**rescue, **{p: finals(r, ceiling) for p, r in runs.items()}}, runs


def record(
    warm_loss: Mapping[tuple[str, int, bool, float], Sequence[float]],
    rel_change: Mapping[str, Mapping[int, Any]],
    scans: Mapping[str, Any],
    lets: Mapping[str, Sequence[float]],
    to_plateau: Mapping[str, Any],
    best: Mapping[str, Mapping[str, Any]],
    versus: Mapping[str, Sequence[float]],
    optimizers: Mapping[tuple[str, str], Mapping[str, Any]],
    rescue: Mapping[str, Any],
    floor: Mapping[str, float],
    seeds: Sequence[int],
    fresh: Mapping[str, Sequence[int]],
) -> dict[str, Any]:
    """The notebook's results (all but the verdicts): per-seed losses of every arm (``seeds``, or the
    claim's ``fresh`` seeds), the scans, the tuning records."""
    per_seed = lambda losses, s=seeds: arm_record({k: {"final_val": v} for k, v in zip(s, losses)})
    return {
        "trained_relative_change": {p: {"seeds": list(v), "values": list(v.values())} for p, v in rel_change.items()},
        "warmup_arms": {
            f"{p} L{d} {'warmup' if w else 'no warmup'} lr={lr:g}": per_seed(v)
            for (p, d, w, lr), v in warm_loss.items()
        },
        "warmup_scan": {
            "depth": scans["depth"],
            "pick": scans["pick"],
            **{f"L{d}": v for d, v in scans["scans"].items()},
        },
        "warmup_lets_train": {k: per_seed(lets[k], fresh["warmup"]) for k in ("warmup", "no warmup") if lets[k]},
        "post_vs_pre": {**to_plateau, **{p: {**b, **per_seed(versus[p], fresh["versus"])} for p, b in best.items()}},
        "adam_vs_sgd": {
            f"{p} {o}": {**t, **per_seed(t["final"], fresh["optimizers"])} for (p, o), t in optimizers.items()
        },
        "unigram_loss": dict(floor),
        "rescue": {**rescue, **{k: per_seed(rescue[k], fresh["rescue"]) for k in ("post", "deepnorm") if rescue[k]}},
    }


Row = tuple[str, list[Comparison]]
"""A verdict row's measured text and comparisons (`protocol.row`)."""


def warmup_lets_train(
    lets: Mapping[str, Sequence[float]], point: Mapping[str, Any] | None, depth: int, floor: float, margin: float
) -> Row:
    """Post-LN at the scan's ``point``: loss without warmup minus with (paired by seed) greater than 0,
    and the loss without warmup above the failure line ``floor - margin`` (``floor``: the unigram loss);
    not measured where no cell trains."""
    if point is None:
        return "Post-LN trains at no depth, LR and warmup of the dev scan", [
            Comparison.unmeasured("greater", "deep Post-LN trains nowhere in the scan: nothing to rescue")
        ]
    what = (
        f"{depth} layers, Post-LN, Adam at the dev scan's pick (lr {point['lr']:g}, warmup {point['warmup']}): "
        f"loss(no warmup) - loss(warmup); loss(no warmup) against the unigram loss - {margin} = {floor - margin:.3f}"
    )
    line = floor - margin
    gap = np.subtract(lets["no warmup"], lets["warmup"])
    return what, [paired(gap, expect="greater"), paired(lets["no warmup"], expect="greater", reference=line)]


def pre_without_warmup(
    warm_loss: Mapping[tuple[str, int, bool, float], Sequence[float]],
    lrs: Sequence[float],
    depths: Sequence[int],
    margin: float,
) -> Row:
    """Pre-LN's loss without warmup minus with, per LR and depth: no greater than ``margin`` (TOST)."""
    cells = [(lr, d) for lr in lrs for d in sorted(set(depths))]
    gap = lambda lr, d: np.subtract(warm_loss["pre", d, False, lr], warm_loss["pre", d, True, lr])
    what = "loss(no warmup) - loss(warmup), " + ", ".join(f"{d} layers lr {lr:g}" for lr, d in cells)
    return what, [paired(gap(lr, d), expect="not greater", margin=margin) for lr, d in cells]


def post_below_pre(
    versus: Mapping[str, Sequence[float]], best: Mapping[str, Mapping[str, Any]], depth: int, steps: int
) -> Row:
    """Post-LN's loss minus Pre-LN's, each at its best setting (paired by seed), less than 0."""
    post, pre = best["post"], best["pre"]
    what = (
        f"{depth} layers, {steps} steps: loss post (lr {post['lr']:.3g}, warmup {post['warmup']}) - pre "
        f"(lr {pre['lr']:.3g}, warmup {pre['warmup']})"
    )
    return what, [paired(versus["post"], versus["pre"], expect="less")]


def sgd_costs_post_more(optimizers: Mapping[tuple[str, str], Mapping[str, Any]], depth: int, warmup: int) -> Row:
    """(loss SGD - loss Adam) for Post-LN minus the same for Pre-LN (paired by seed), greater than 0."""
    lr = lambda p, o: f"{optimizers[p, o]['lr']:.3g}"
    what = (
        f"{depth} layers, warmup {warmup}: (loss SGD - loss Adam) for post (lr {lr('post', 'sgd')} vs "
        f"{lr('post', 'adam')}) minus the same for pre ({lr('pre', 'sgd')} vs {lr('pre', 'adam')})"
    )
    cost = lambda p: np.subtract(optimizers[p, "sgd"]["final"], optimizers[p, "adam"]["final"])
    return what, [paired(cost("post"), cost("pre"), expect="greater")]


def deepnorm_rescues(rescue: Mapping[str, Any], depth: int, floor: float, margin: float, seeds: Sequence[int]) -> Row:
    """DeepNorm's loss minus Post-LN's less than 0, and DeepNorm's loss below the failure line
    ``floor - margin``, over the runs of ``seeds``; not measured where Post-LN failed nowhere in the
    sweep."""
    if not rescue["post_fails_in_sweep"]:
        why = f"Post-LN with warmup did not fail at any LR up to {rescue['lr']:g}: nothing to rescue"
        return f"{depth} layers: Post-LN fails nowhere", [Comparison.unmeasured("less", why)]
    what = (
        f"fresh seeds {seeds[0]}-{seeds[-1]}, {depth} layers, lr {rescue['lr']:.3g}, both with warmup: "
        f"loss deepnorm - post; deepnorm's loss against the unigram loss - {margin} = {floor - margin:.3f}"
    )
    line = floor - margin
    return what, [
        paired(rescue["deepnorm"], rescue["post"], expect="less"),
        paired(rescue["deepnorm"], expect="less", reference=line),
    ]


def change_falls(rel_change: Mapping[int, Any], depth: int) -> Row:
    """The log-log slope of each trained checkpoint's relative change (by seed, shape (depth,))
    against the layer, less than 0 (the seeds are the claim's fresh ones)."""
    x = np.log(np.arange(1, depth + 1))
    slopes = [linear_fit(x, np.log(r))[0] for r in rel_change.values()]
    seeds = sorted(rel_change)
    what = f"fresh seeds {seeds[0]}-{seeds[-1]}: log-log slope of ||x_(l+1) - x_l|| / ||x_l|| against l, {depth} layers"
    return what, [paired(slopes, expect="less")]
