"""Input-pipeline throughput: how fast the training iterator produces batches."""

from __future__ import annotations

import time

from transformer_jax.data.config import DataConfig
from transformer_jax.data.pipeline import build_data


def measure_throughput(cfg: DataConfig, batch_size: int, n_batches: int = 200,
                       warmup: int = 10) -> dict[str, float]:
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
    return {"tokens_per_s": tokens / elapsed, "batches_per_s": n_batches / elapsed,
            "real_tokens_per_s": real / elapsed, "setup_s": setup}
