"""How a batch goes through a model: the forward call and the batch arrays the loss compares
against, one per batch layout (``Data.task``): ``lm`` (a ``DecoderLM`` on packed token rows) and
``seq2seq`` (an ``EncoderDecoder`` on source and target rows). The train step, the eval step and the
benchmarks all read them here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

from transformer_jax.core.registry import Registry


@dataclasses.dataclass(frozen=True)
class BatchForward:
    """``forward(model, batch, dropout_key) -> (logits_BTV, aux)``; ``targets``/``weights`` name the
    batch arrays the loss compares against; ``tokens`` the array whose size counts processed tokens."""

    forward: Callable
    targets: str
    weights: str = "weights"
    tokens: str = "inputs"


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


FORWARDS: Registry[BatchForward] = Registry("batch layout")
FORWARDS.register("lm", BatchForward(_lm_forward, targets="targets", tokens="inputs"))
FORWARDS.register("seq2seq", BatchForward(_seq2seq_forward, targets="tgt_out", tokens="tgt_in"))
