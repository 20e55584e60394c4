"""Settings the chosen choices do not read (``SELECTORS``, registries' ``reads=``): a field that
only some entries of a registry read, set while another is chosen, is an error naming both. What the
nested settings classes cannot express by their structure: the model kinds (``models.kinds``: the
``ModelConfig`` fields each kind reads)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from transformer_jax.core.configlib import ConfigError


def _walk(cfg: Any, dotted: str) -> tuple[Any, Any]:
    """(value, default) of the dotted field ``dotted`` of ``cfg``; (None, None) when a group on
    the way is None (its fields are then not set at all)."""
    owner = cfg
    parts = dotted.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
        if owner is None:
            return None, None
    field = {f.name: f for f in dataclasses.fields(owner)}[parts[-1]]
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = dataclasses.MISSING
    return getattr(owner, parts[-1]), default


def unread_fields(cfg: Any, *, prefix: str = "", explicit: typing.Iterable[str] = ()) -> list[str]:
    """One message per field of ``cfg`` (and of its sub-configs) that the chosen variants do not
    read but that is set: to a value other than its default, or explicitly (``explicit``: the full
    dotted keys given on the command line, e.g. ``model.execution.remat``).

    A config class names its choices in ``SELECTORS``, pairs ``(field, registry)``; each entry of
    the registry declares the fields it reads (``Registry.register(..., reads=...)``). A field some
    entry reads and the chosen one does not (none of the chosen ones, for a tuple of names) is unread.
    """
    explicit = set(explicit)
    problems = []
    for field, registry in getattr(type(cfg), "SELECTORS", ()):
        choice = getattr(cfg, field)
        chosen = choice if isinstance(choice, tuple) else (choice,)  # a tuple: several entries at once
        if not all(c in registry for c in chosen):
            continue
        reads = {f for c in chosen for f in registry.reads(c)}
        for name in registry.governed():
            if name in reads or name == field:
                continue
            value, default = _walk(cfg, name)
            path = prefix + name
            if (value is None and default is None) or (path not in explicit and value == default):
                continue
            readers = [n for n in registry.names() if name in registry.reads(n)]
            problems.append(
                f"{path}={value!r} is not read with {prefix}{field}={choice!r} (read only by the "
                f"{registry.kind} {', '.join(map(repr, readers))}): remove the setting"
                + ("" if default is dataclasses.MISSING else f" (default {default!r})")
                + f" or choose another {prefix}{field}"
            )
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if dataclasses.is_dataclass(sub) and not isinstance(sub, type):
            problems += unread_fields(sub, prefix=f"{prefix}{f.name}.", explicit=explicit)
    return problems


def check_reads(
    cfg: Any, *, prefix: str = "", explicit: typing.Iterable[str] = (), only_explicit: bool = False
) -> None:
    """Raises one ``ConfigError`` listing every `unread_fields` problem of ``cfg``, one per field
    (``only_explicit``: only the fields in ``explicit``, e.g. overrides of a saved run's config)."""
    explicit = set(explicit)
    by_field: dict[str, str] = {}
    for problem in unread_fields(cfg, prefix=prefix, explicit=explicit):
        field = problem.split("=", 1)[0]
        if not only_explicit or field in explicit:
            by_field.setdefault(field, problem)
    problems = list(by_field.values())
    if problems:
        raise ConfigError("settings that the chosen variants do not read:\n  " + "\n  ".join(problems))
