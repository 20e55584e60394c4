"""Token-weighted evaluation over a split: loss (mean NLL), perplexity, accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import jax
import numpy as np


def evaluate(eval_step: Callable, state, batches: Iterable[dict], put_batch: Callable) -> dict[str, float]:
    """``state``: anything with ``params`` and ``model_state`` (a TrainState).

    Sums NLL and target weights over all batches (padding has weight 0), then
    loss = sum NLL / sum weights and perplexity = exp(loss)."""
    totals = None
    for batch in batches:
        out = eval_step(state.params, state.model_state, put_batch(batch))
        totals = out if totals is None else jax.tree.map(lambda a, b: a + b, totals, out)
    if totals is None:
        raise ValueError("the evaluation split produced no batches")
    totals = {k: float(np.asarray(v)) for k, v in jax.device_get(totals).items()}
    weight = max(totals["weight_sum"], 1.0)
    loss = totals["nll_sum"] / weight
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "accuracy": totals["correct_sum"] / weight,
            "tokens": totals["weight_sum"]}
