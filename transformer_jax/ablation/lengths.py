"""Training at one context and evaluating at longer ones (``notebooks/positional_encoding.py``,
section 4): each arm tuned and run on every seed, each run's validation loss measured at every
evaluation context from its last checkpoint and kept with its summary (`store.run_arm`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transformer_jax.ablation.runs import Curves, eval_loss
from transformer_jax.ablation.tuning import tuned_runs


def losses_by_length(eval_lens: Sequence[int]) -> Callable[[Curves], dict[str, float]]:
    """A `store.run_arm` measure: ``{str(n): validation loss of the trained run at context n}``."""
    return lambda c: {str(n): eval_loss(c.workdir, [f"data.seq_len={n}"]) for n in eval_lens}


def measured_by_length(trained: Sequence[Curves], eval_lens: Sequence[int]) -> dict[int, list[float]]:
    """``{n: [each run's loss at context n]}`` from the runs' kept measurements (nan for a run that
    measured nothing: it diverged)."""
    measured = [c.summary["measured"] or {} for c in trained]
    return {n: [m.get(str(n), math.nan) for m in measured] for n in eval_lens}


@dataclasses.dataclass(frozen=True)
class LengthArms:
    """What `run_length_arms` returns, each by arm."""

    sweeps: dict[str, Any]  # the learning-rate sweep
    configs: dict[str, Any]  # the tuned config
    curves: dict[str, Curves]  # "<arm> s<seed>"
    eval_loss: dict[str, dict[int, list[float]]]  # {arm: {context: [loss by seed]}}


def run_length_arms(
    arms: Mapping[str, Any], grid: Sequence[float], notebook: str, seeds: Sequence[int], eval_lens: Sequence[int]
) -> LengthArms:
    """Each ``{arm: config}`` tuned over ``grid`` on the dev split of seed 0 (`tuning.tuned_runs`),
    then run on ``seeds``, its validation loss measured at each context of ``eval_lens``."""
    sweeps, configs, curves, losses = {}, {}, {}, {}
    for arm, cfg in arms.items():
        # Seed 0, not tuned_runs' DEV_SEED default: the committed sweep runs (`<arm>_lr=<lr>_dev__s0`) were
        # trained by sweep_lr's seeds=(0,) before tuned_runs existed (b2b423b kept it), and the seed is in
        # each run's key, so DEV_SEED would retrain every sweep. Seed 0 sees no scored data here: a
        # text corpus's dev split is carved from its training text (`dev_split`); DEV_SEED is for
        # synthetic tasks, whose examples the seed draws.
        sweeps[arm], configs[arm], trained = tuned_runs(
            cfg, arm, grid, notebook, seeds, sweep_seeds=(0,), measure=losses_by_length(eval_lens)
        )
        curves |= {f"{arm} s{s}": c for s, c in zip(seeds, trained)}
        losses[arm] = measured_by_length(trained, eval_lens)
    return LengthArms(sweeps, configs, curves, losses)
