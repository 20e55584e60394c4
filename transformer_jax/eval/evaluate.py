"""The eval step and token-weighted evaluation over a split: loss (mean NLL), perplexity, accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np
from flax import nnx

from transformer_jax.eval.tasks import Task
from transformer_jax.ops.losses import cross_entropy


def evaluate(eval_step: Callable, state, batches: Iterable[dict], put_batch: Callable) -> dict[str, float]:
    """``state``: anything with ``params`` and ``model_state`` (a TrainState).

    Sums NLL and target weights over all batches (padding has weight 0), then
    loss = sum NLL / sum weights and perplexity = exp(loss); ``batches`` says how many were read."""
    totals, n_batches = None, 0
    for batch in batches:
        n_batches += 1
        out = eval_step(state.params, state.model_state, put_batch(batch))
        totals = out if totals is None else jax.tree.map(lambda a, b: a + b, totals, out)
    if totals is None:
        raise ValueError("the evaluation split produced no batches")
    totals = {k: float(np.asarray(v)) for k, v in jax.device_get(totals).items()}
    weight = max(totals["weight_sum"], 1.0)
    loss = totals["nll_sum"] / weight
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "accuracy": totals["correct_sum"] / weight,
        "tokens": totals["weight_sum"],
        "batches": n_batches,
    }


def make_eval_step(graphdef, task: Task) -> Callable[[Any, Any, dict], dict]:
    """``eval_step(params, model_state, batch) -> {nll_sum, weight_sum, correct_sum}`` (no dropout)."""

    def eval_step(params, model_state, batch):
        model = nnx.merge(graphdef, params, model_state)
        logits, _ = task.forward(model, batch, None)
        ce = cross_entropy(logits, batch[task.targets], weights_BT=batch[task.weights])
        return {"nll_sum": ce["nll_sum"], "weight_sum": ce["weight_sum"], "correct_sum": ce["correct_sum"]}

    return eval_step
