"""Seconds per train step of several configs, timed side by side in alternating rounds.

Each config's real jitted train step (the one `loop.train` runs, on one device, with batches of
its own data prefetched in memory) is compiled and warmed up first; then every round times
``steps`` steps of each config in turn, so that a drift of the machine's speed reaches all of them
alike and the per-round ratios pair up. Medians over rounds are the figures to quote.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

from transformer_jax.core import compiler
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.config import Config
from transformer_jax.train.run import Run, setup
from transformer_jax.train.step import make_train_step

PREFETCHED = 4


@dataclasses.dataclass
class PreparedStep:
    """A config's compiled train step, its state after the warm-up and a few batches in memory
    (``workdir``: the temporary folder its run was set up in, removed by `close`)."""

    workdir: str
    run: Run
    step: Callable
    batches: list[dict]
    state: Any
    metrics: dict

    def seconds_per_step(self, steps: int) -> float:
        """Runs ``steps`` steps (cycling the prefetched batches); the mean seconds per step."""
        t0 = time.perf_counter()
        state = self.state
        for i in range(steps):
            state, _ = self.step(state, self.batches[i % len(self.batches)], jax.random.key(i))
        jax.block_until_ready(state)
        self.state = state
        return (time.perf_counter() - t0) / steps

    def close(self) -> None:
        self.run.checkpoints.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def prepare_step(cfg: Config, *, warmup: int = 3) -> PreparedStep:
    """`PreparedStep` of ``cfg`` on the first device, trained ``warmup`` steps (at least one, which
    compiles it) on its training data; ``metrics`` are the last warm-up step's."""
    if warmup < 1:
        raise ValueError(f"warmup={warmup}: at least one step (the one that compiles)")
    workdir = tempfile.mkdtemp(prefix="tj_timing_")
    run, _ = setup(cfg, workdir, restore=False, devices=jax.devices()[:1])
    task = FORWARDS.get(run.data.task)
    step = compiler.jit(make_train_step(run.graphdef, run.tx, task, run.cfg.train, run.schedule), donate_argnums=(0,))
    state, metrics = run.state, {}
    with run.data.train_iterator() as it:
        for i in range(warmup):
            state, metrics = step(state, run.put_batch(next(it)), jax.random.key(i))
        batches = [run.put_batch(next(it)) for _ in range(PREFETCHED)]
    jax.block_until_ready(state)
    return PreparedStep(workdir, run, step, batches, state, metrics)


def alternating_rounds(timers: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Calls every timer once per round, in order, ``rounds`` times: ``{name: [one value per round]}``."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: time at least one round")
    out: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            out[name].append(float(timer()))
    return out


def step_seconds_by_round(
    configs: Mapping[str, Config], *, rounds: int = 7, steps: int = 20, warmup: int = 3
) -> dict[str, list[float]]:
    """Seconds per train step of each config, one mean over ``steps`` steps per round, the configs
    timed in turn within each round: ``{name: [seconds per step, one per round]}``."""
    prepared = {name: prepare_step(cfg, warmup=warmup) for name, cfg in configs.items()}
    try:
        return alternating_rounds({n: (lambda p=p: p.seconds_per_step(steps)) for n, p in prepared.items()}, rounds)
    finally:
        for p in prepared.values():
            p.close()
