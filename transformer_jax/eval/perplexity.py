"""Token-weighted loss and perplexity over a split (padding has weight 0 and is excluded)."""

from __future__ import annotations

import types
from collections.abc import Iterable

from transformer_jax.core import compiler
from transformer_jax.eval.evaluate import evaluate, make_eval_step
from transformer_jax.models.forward import FORWARDS


def perplexity(graphdef, params, model_state, batches: Iterable[dict], task: str, *, put_batch=None) -> dict:
    """``{"loss", "perplexity", "accuracy", "tokens"}`` of the model over ``batches`` of ``task``
    ("lm" or "seq2seq"): loss = sum of per-token NLL / number of target tokens, perplexity =
    exp(loss) (``evaluate`` run with the task's eval step)."""
    state = types.SimpleNamespace(params=params, model_state=model_state)
    step = compiler.jit(make_eval_step(graphdef, FORWARDS.get(task)))
    return evaluate(step, state, batches, put_batch or (lambda b: b))


def split_perplexity(run, split: str = "val", max_batches: int | None = None) -> dict:
    """``perplexity`` of a ``train.loop.Run``'s current state over one split of its data."""
    return perplexity(
        run.graphdef,
        run.state.params,
        run.state.model_state,
        run.data.eval_batches(split, max_batches),
        run.data.task,
        put_batch=run.put_batch,
    )
