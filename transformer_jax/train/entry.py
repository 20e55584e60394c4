"""Model kinds that train, evaluate and sample through their own entry points instead of the
gradient loop (the count-based n-gram); every other kind goes through ``train.loop.Trainer``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from transformer_jax.core.registry import Registry


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """``train(cfg, workdir) -> summary``; ``evaluate(workdir, split, max_batches, overrides=...)
    -> dict``; ``sample(workdir, *, prompt, max_new_tokens, sampling, seed) -> str``
    (``sampling``: a ``decode.SamplingConfig``)."""

    train: Callable[..., dict]
    evaluate: Callable[..., dict]
    sample: Callable[..., str]


ENTRY_POINTS: Registry[EntryPoint] = Registry("model kind with its own entry point")


def entry_point(kind: str) -> EntryPoint | None:
    """The entry point of model kind ``kind``, or None for the gradient-trained kinds."""
    return ENTRY_POINTS.get(kind) if kind in ENTRY_POINTS else None
