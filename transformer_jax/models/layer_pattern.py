"""Which layers attend locally (a sliding window) and which globally: ``model.attention_pattern``.

``ATTENTION_PATTERNS`` maps a name to ``fn(n_layers, global_every) -> ("local" | "global", ...)``:
``uniform`` leaves every layer as ``model.attention_kind`` says; ``local_global`` makes layer i
global when (i + 1) % global_every == 0 and local (a window of ``model.attention_local_window`` tokens,
RoPE base ``model.position.local_theta`` if set) otherwise: Gemma 2 is every=2 (local, global, ...),
Gemma 3 every=6 (five local layers, then one global).
"""

from __future__ import annotations

from collections.abc import Callable

from transformer_jax.core.registry import Registry

ATTENTION_PATTERNS: Registry[Callable[[int, int], tuple[str, ...]]] = Registry("attention pattern")


@ATTENTION_PATTERNS.register("uniform")
def _uniform(n_layers: int, global_every: int) -> tuple[str, ...]:
    return ("uniform",) * n_layers


@ATTENTION_PATTERNS.register("local_global", reads=("attention_local_window", "attention_global_every"))
def _local_global(n_layers: int, global_every: int) -> tuple[str, ...]:
    return tuple("global" if (i + 1) % global_every == 0 else "local" for i in range(n_layers))


def layer_types(pattern: str, n_layers: int, global_every: int) -> tuple[str, ...]:
    """Each layer's type under ``pattern``: "uniform", "local" or "global"."""
    return ATTENTION_PATTERNS.get(pattern)(n_layers, global_every)
