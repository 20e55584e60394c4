"""Is training several seeds in one program (``jax.vmap`` over seeds) faster than one after another?

The notebooks' Shakespeare model (``ablation.shakespeare_config``, FULL size): the train step of
``--seeds`` seeds, called once per seed on each seed's state and batch, against ``jax.vmap`` of
the same step over the stacked states and batches. Rounds alternate the two; prints the medians,
the median of the paired ratios and ``max_param_diff`` (how far apart the two ways' parameters are
after two steps) as one JSON line. Pin it (``taskset -c 0``) to ask the question for one core.
Run it on a quiet machine: it times things.

    python experiments/bench/vmap_seeds.py --seeds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax import ablation
from transformer_jax.core import compiler
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.run import setup
from transformer_jax.train.step import make_train_step

N_BATCHES = 4


def stack(trees: list) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed round")
    args = parser.parse_args()
    for name in ("seeds", "rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: must be at least 1")
    base = ablation.shakespeare_config("vmap_seeds", steps=2000)
    seeded = [dataclasses.replace(base, train=dataclasses.replace(base.train, seed=s)) for s in range(args.seeds)]
    runs = [setup(cfg, tempfile.mkdtemp(), restore=False, devices=jax.devices()[:1])[0] for cfg in seeded]
    run = runs[0]
    step = make_train_step(run.graphdef, run.tx, FORWARDS.get(run.data.task), run.cfg.train, run.schedule)
    one, many = compiler.jit(step), compiler.jit(jax.vmap(step))
    batches = []
    for r in runs:
        it = r.data.train_iterator(None)
        batches.append([{k: jnp.asarray(v) for k, v in next(it).items()} for _ in range(N_BATCHES)])
    key = jax.random.key(0)
    keys = jnp.stack([key] * args.seeds)
    stacked_batches = [stack([b[i] for b in batches]) for i in range(N_BATCHES)]

    def one_by_one(steps: int) -> float:
        states = [r.state for r in runs]
        t0 = time.perf_counter()
        for i in range(steps):
            states = [one(s, b[i % N_BATCHES], key)[0] for s, b in zip(states, batches)]
        jax.block_until_ready(states)
        return (time.perf_counter() - t0) / steps

    def vmapped(steps: int) -> float:
        state = stack([r.state for r in runs])
        t0 = time.perf_counter()
        for i in range(steps):
            state = many(state, stacked_batches[i % N_BATCHES], keys)[0]
        jax.block_until_ready(state)
        return (time.perf_counter() - t0) / steps

    def difference() -> float:
        """Largest parameter difference between the two ways after two steps (the premise: they agree)."""
        states = [r.state for r in runs]
        state = stack(states)
        for i in range(2):
            states = [one(s, b[i], key)[0] for s, b in zip(states, batches)]
            state = many(state, stacked_batches[i], keys)[0]
        diffs = jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), stack(states).params, state.params)
        return float(max(jax.tree.leaves(diffs)))

    max_param_diff = difference()
    a, b = [], []
    for _ in range(args.rounds):
        a.append(one_by_one(args.steps))
        b.append(vmapped(args.steps))
    print(
        json.dumps(
            {
                "seeds": args.seeds,
                "one_by_one_ms": round(1e3 * statistics.median(a), 1),
                "vmap_ms": round(1e3 * statistics.median(b), 1),
                "one_by_one_over_vmap": round(statistics.median(x / y for x, y in zip(a, b)), 3),
                "max_param_diff": max_param_diff,
            }
        )
    )


if __name__ == "__main__":
    main()
