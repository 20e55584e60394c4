"""How a batch of each task goes through a model: the forward call and the loss targets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

from transformer_jax.core.registry import Registry
from transformer_jax.eval.translation import validation_bleu


@dataclasses.dataclass(frozen=True)
class Task:
    """``forward(model, batch, dropout_key) -> (logits_BTV, aux)``; ``targets``/``weights``
    name the batch arrays the loss compares against; ``tokens`` counts processed tokens.

    ``extra_eval(run, state, split, max_batches) -> dict`` (optional) adds task metrics to each
    validation (e.g. BLEU for translation); ``run`` is a ``train.loop.Run`` (duck-typed).
    """

    forward: Callable
    targets: str
    weights: str = "weights"
    tokens: str = "inputs"
    extra_eval: Callable | None = None


def _lm_forward(model, batch, dropout_key: jax.Array | None):
    return model(
        batch["inputs"], positions_BT=batch["positions"], segment_ids_BT=batch["segment_ids"], dropout_key=dropout_key
    )


def _seq2seq_forward(model, batch, dropout_key: jax.Array | None):
    return model(
        batch["src"],
        batch["tgt_in"],
        src_segment_ids_BS=batch["src_segment_ids"],
        tgt_segment_ids_BT=batch["tgt_segment_ids"],
        src_positions_BS=batch["src_positions"],
        tgt_positions_BT=batch["tgt_positions"],
        dropout_key=dropout_key,
    )


TASKS: Registry[Task] = Registry("task")
TASKS.register("lm", Task(_lm_forward, targets="targets", tokens="inputs"))
TASKS.register("seq2seq", Task(_seq2seq_forward, targets="tgt_out", tokens="tgt_in", extra_eval=validation_bleu))
