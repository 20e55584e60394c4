"""Config keys renamed since runs were saved, mapped in one place.

`upgrade` turns a saved config dict (a run's ``config.json``, a run summary's config) of any earlier
layout into today's; `legacy` turns today's into the layout the committed ablation runs were hashed
under, so their identities stay; `renamed_key` names the new key of an old ``--set`` key.

One module per config section (`model`, `data`, `train`, ...), each with ``PATH`` (where the section sits in a run's
config), ``STEPS`` ((upgrade, legacy) pairs acting in place on the section's dict; upgrade leaves
today's layout as it is) and ``RENAMED`` (old dotted key -> where it went). Pure dict work, no config
classes: every layer may call it.
"""

from __future__ import annotations

import copy
from typing import Any

from transformer_jax.core.migration import baseline, data, model, optim, train

_SECTIONS = (model, baseline, data, train, optim)

RENAMED_KEYS: dict[str, str] = {old: new for section in _SECTIONS for old, new in section.RENAMED.items()}


def renamed_key(key: str) -> str | None:
    """Where the old ``--set`` key ``key`` went, or None if it was not renamed."""
    return RENAMED_KEYS.get(key)


def _section(config: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    for name in path:
        config = config.get(name)  # type: ignore[assignment]
        if not isinstance(config, dict):
            return None
    return config


def _target(config: dict[str, Any], path: tuple[str, ...], whole: bool) -> dict[str, Any] | None:
    if whole:
        return _section(config, path)
    return _section(config, path[1:]) if path[0] == "model" else None


def upgrade(config: dict[str, Any], *, whole: bool = True) -> dict[str, Any]:
    """A copy of a saved config dict in today's layout (``whole``: a run's config with its sections;
    else a model config alone). Today's layout passes through unchanged."""
    config = copy.deepcopy(config)
    for section in _SECTIONS:
        for up, _ in section.STEPS:
            target = _target(config, section.PATH, whole)
            if target is not None:
                up(target)
    return config


def legacy(config: dict[str, Any], *, whole: bool = True) -> dict[str, Any]:
    """A copy of today's config dict in the layout of the committed runs (the inverse of `upgrade`
    for every config those runs could hold)."""
    config = copy.deepcopy(config)
    for section in reversed(_SECTIONS):
        for _, down in reversed(section.STEPS):
            target = _target(config, section.PATH, whole)
            if target is not None:
                down(target)
    return config
