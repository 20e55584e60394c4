"""The eval step and token-weighted evaluation over a split: loss (mean NLL), perplexity, accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from transformer_jax.data.mixture import SOURCE_IDS
from transformer_jax.models.forward import BatchForward
from transformer_jax.ops.losses import cross_entropy


def evaluate(
    eval_step: Callable, state, batches: Iterable[dict], put_batch: Callable, sources: Sequence[str] = ()
) -> dict[str, float]:
    """``state``: anything with ``params`` and ``model_state`` (a TrainState).

    Sums NLL and target weights over all batches (padding has weight 0), then
    loss = sum NLL / sum weights and perplexity = exp(loss); ``batches`` says how many were read.
    With ``sources`` (a mixture's names; ``eval_step`` made with as many), also ``loss/NAME`` for
    each source with targets in the split."""
    totals, n_batches = None, 0
    for batch in batches:
        n_batches += 1
        out = eval_step(state.params, state.model_state, put_batch(batch))
        totals = out if totals is None else jax.tree.map(lambda a, b: a + b, totals, out)
    if totals is None:
        raise ValueError("the evaluation split produced no batches")
    totals = {k: np.asarray(v, np.float64) for k, v in jax.device_get(totals).items()}
    weight = max(float(totals["weight_sum"]), 1.0)
    loss = float(totals["nll_sum"]) / weight
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "accuracy": float(totals["correct_sum"]) / weight,
        "tokens": float(totals["weight_sum"]),
        "batches": n_batches,
        **per_source_losses(sources, totals.get("source/loss_sum"), totals.get("source/weight_sum")),
    }


def per_source_losses(sources: Sequence[str], nll_sums, weight_sums) -> dict[str, float]:
    """``{"loss/NAME": NLL / weight}`` for each source with weight (none without ``sources``)."""
    if not sources:
        return {}
    nll, weight = np.asarray(nll_sums, np.float64), np.asarray(weight_sums, np.float64)
    return {f"loss/{name}": float(nll[i] / weight[i]) for i, name in enumerate(sources) if weight[i] > 0}


def make_eval_step(graphdef, task: BatchForward, n_sources: int = 0) -> Callable[[Any, Any, dict], dict]:
    """``eval_step(params, model_state, batch) -> {nll_sum, weight_sum, correct_sum}`` (no dropout);
    with ``n_sources``, also ``source/loss_sum`` and ``source/weight_sum`` [n_sources] by
    ``batch["source_ids"]``."""

    def eval_step(params, model_state, batch):
        model = nnx.merge(graphdef, params, model_state)
        logits, _ = task.forward(model, batch, None)
        groups = {"groups_B": batch[SOURCE_IDS], "n_groups": n_sources} if n_sources else {}
        ce = cross_entropy(logits, batch[task.targets], weights_BT=batch[task.weights], **groups)
        out = {"nll_sum": ce["nll_sum"], "weight_sum": ce["weight_sum"], "correct_sum": ce["correct_sum"]}
        if n_sources:
            out.update({"source/loss_sum": ce["nll_sum_by_group"], "source/weight_sum": ce["weight_sum_by_group"]})
        return out

    return eval_step
