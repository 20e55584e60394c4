"""``bench data``: input-pipeline tokens/s against the tokens/s the train step consumes."""

from __future__ import annotations

import time

import jax
import numpy as np

from transformer_jax import compiler
from transformer_jax.data.bench import measure_throughput
from transformer_jax.train.config import Config
from transformer_jax.train.loop import setup
from transformer_jax.train.optim import make_schedule
from transformer_jax.train.step import make_train_step
from transformer_jax.train.tasks import TASKS


def train_step_tokens_per_s(cfg: Config, workdir: str, steps: int = 30) -> float:
    """Median tokens/s of the real jitted train step on one device (data prefetched in memory)."""
    run, _ = setup(cfg, workdir, restore=False, devices=jax.devices()[:1])
    step = compiler.jit(make_train_step(run.graphdef, run.tx, TASKS.get(run.data.task), run.cfg.train,
                                        make_schedule(run.cfg.train.optim, run.cfg.train.steps)), donate_argnums=(0,))
    with run.data.train_iterator() as it:
        batches = [run.put_batch(next(it)) for _ in range(4)]
    state, key = run.state, jax.random.key(0)
    state, _ = step(state, batches[0], key)
    jax.block_until_ready(state.params)
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        state, _ = step(state, batches[i % 4], key)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - t0)
    run.checkpoints.close()
    task = TASKS.get(run.data.task)
    return batches[0][task.tokens].size / float(np.median(times))


def bench_data(cfg: Config, workdir: str, n_batches: int = 2000) -> dict:
    data = measure_throughput(cfg.data, cfg.train.batch_size, n_batches=n_batches)
    train = train_step_tokens_per_s(cfg, workdir)
    return {"bench": "data", "data_tokens_per_s": data["tokens_per_s"], "data_batches_per_s": data["batches_per_s"],
            "train_step_tokens_per_s": train, "ratio": data["tokens_per_s"] / train,
            "batch_size": cfg.train.batch_size, "seq_len": cfg.data.seq_len}
