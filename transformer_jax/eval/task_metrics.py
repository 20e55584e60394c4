"""Metrics a batch layout adds to each validation beyond loss, perplexity and accuracy: BLEU for
``seq2seq`` (translation). ``metrics(run, state, split, max_batches) -> dict``, where ``run`` is a
``train.run.Run``."""

from __future__ import annotations

from collections.abc import Callable

from transformer_jax.core.registry import Registry
from transformer_jax.eval.translation import validation_bleu

EXTRA_METRICS: Registry[Callable[..., dict]] = Registry("extra validation metrics")
EXTRA_METRICS.register("seq2seq", validation_bleu)
