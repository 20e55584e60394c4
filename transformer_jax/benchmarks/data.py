"""``bench data``: input-pipeline tokens/s against the tokens/s the train step consumes."""

from __future__ import annotations

import time

import jax
import numpy as np

from transformer_jax.core import compiler
from transformer_jax.data.config import DataConfig
from transformer_jax.data.pipeline import build_data
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.config import Config
from transformer_jax.train.run import setup
from transformer_jax.train.step import make_train_step


def measure_throughput(cfg: DataConfig, batch_size: int, n_batches: int = 200, warmup: int = 10) -> dict[str, float]:
    """Time ``n_batches`` of ``build_data(cfg).train_iterator()`` after ``warmup`` batches.

    Returns ``tokens_per_s`` (input positions, padding included), ``batches_per_s``,
    ``real_tokens_per_s`` (weight-1 targets) and ``setup_s`` (corpus, tokenizer, first batch).
    """
    t0 = time.perf_counter()
    data = build_data(cfg, batch_size=batch_size)
    with data.train_iterator() as it:
        for _ in range(max(warmup, 1)):
            next(it)
        setup = time.perf_counter() - t0
        tokens = real = 0
        start = time.perf_counter()
        for _ in range(n_batches):
            batch = next(it)
            tokens += batch["weights"].size
            real += float(batch["weights"].sum())
        elapsed = time.perf_counter() - start
    return {
        "tokens_per_s": tokens / elapsed,
        "batches_per_s": n_batches / elapsed,
        "real_tokens_per_s": real / elapsed,
        "setup_s": setup,
    }


def train_step_tokens_per_s(cfg: Config, workdir: str, steps: int = 30) -> float:
    """Median tokens/s of the real jitted train step on one device (data prefetched in memory)."""
    run, _ = setup(cfg, workdir, restore=False, devices=jax.devices()[:1])
    step = compiler.jit(
        make_train_step(
            run.graphdef,
            run.tx,
            FORWARDS.get(run.data.task),
            run.cfg.train,
            run.schedule,
        ),
        donate_argnums=(0,),
    )
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
    task = FORWARDS.get(run.data.task)
    return batches[0][task.tokens].size / float(np.median(times))


def bench_data(cfg: Config, workdir: str, n_batches: int = 2000) -> dict:
    data = measure_throughput(cfg.data, cfg.train.batch_size, n_batches=n_batches)
    train = train_step_tokens_per_s(cfg, workdir)
    return {
        "bench": "data",
        "data_tokens_per_s": data["tokens_per_s"],
        "data_batches_per_s": data["batches_per_s"],
        "train_step_tokens_per_s": train,
        "ratio": data["tokens_per_s"] / train,
        "batch_size": cfg.train.batch_size,
        "seq_len": cfg.data.seq_len,
    }
