"""The config toolkit every config class uses: validation errors and checks, unread fields, dict round trips.

Pure Python (no JAX). ``--set`` overrides are in ``core.overrides``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from typing import Any, cast

from transformer_jax.core.registry import Registry, did_you_mean


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the fix."""


class ConfigWarning(UserWarning):
    """A config that is accepted but probably not what was meant (e.g. a ``--set`` key given twice)."""


def fail(field: str, value: Any, why: str, fix: str = "") -> typing.NoReturn:
    raise ConfigError(f"{field}={value!r}: {why}" + (f"; {fix}" if fix else ""))


def check_choice(field: str, value: str, registry: Registry | typing.Iterable[str], kind: str | None = None) -> None:
    """``value`` must be a name of ``registry`` (or of the given names)."""
    names = registry.names() if isinstance(registry, Registry) else tuple(registry)
    if value not in names:
        kind = kind or (registry.kind if isinstance(registry, Registry) else field.split(".")[-1])
        hint = did_you_mean(value, names)
        fail(field, value, f"unknown {kind}", f"{hint + ' ' if hint else ''}choose one of: {', '.join(names)}")


def check_positive(field: str, value: float | int, *, allow_zero: bool = False) -> None:
    """A finite number (not a bool) ``> 0``, or ``>= 0`` with ``allow_zero``."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value < 0 or (value == 0 and not allow_zero):
        fail(field, value, "must be a finite " + ("non-negative" if allow_zero else "positive") + " number")


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}
_KIND_WORDS = {int: "an integer", float: "a finite number", bool: "True or False", str: "a string"}


@functools.cache
def _scalar_fields(cls: type) -> tuple[tuple[str, type, bool], ...]:
    """``(name, type, optional)`` of the dataclass fields annotated ``int``, ``float``, ``bool`` or
    ``str``, alone or ``| None`` (annotations read as written: every config module uses
    ``from __future__ import annotations``)."""
    out = []
    for f in dataclasses.fields(cls):
        parts = [p.strip() for p in str(f.type).split("|")] if isinstance(f.type, str) else []
        base = [p for p in parts if p != "None"]
        if len(base) == 1 and base[0] in _SCALARS:
            out.append((f.name, _SCALARS[base[0]], len(parts) == 2))
    return tuple(out)


def _is(kind: type, value: Any) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_types(cfg: Any, prefix: str) -> None:
    """Every scalar field of the dataclass ``cfg`` holds its annotated type: ints are ints (not
    bools or 128.5), floats are finite numbers (NaN and inf refused), ``X | None`` also takes None.
    Errors name ``prefix.field``."""
    for name, kind, optional in _scalar_fields(type(cfg)):
        value = getattr(cfg, name)
        if not (_is(kind, value) or (optional and value is None)):
            fail(f"{prefix}.{name}", value, f"must be {_KIND_WORDS[kind]}" + (" or None" if optional else ""))


def check_range(field: str, value: float, lo: float, hi: float, *, hi_inclusive: bool = False) -> None:
    if not (lo <= value < hi or (hi_inclusive and value == hi)):
        fail(field, value, f"must be in [{lo}, {hi}{']' if hi_inclusive else ')'}")


def check_real(
    field: str, value: Any, *, low: float, high: float | None = None, low_open: bool = False, none_hint: bool = False
) -> None:
    """A finite number ``> low`` (``low_open``) or ``>= low``, and ``< high`` when given."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (high is None or value < high)
    if not ok:
        rng = f"{'>' if low_open else '>='} {low}" + (f" and < {high}" if high is not None else "")
        fail(field, value, f"must be a finite number {rng}" + (" (or None to disable)" if none_hint else ""))


def check_int(field: str, value: Any, *, low: int) -> None:
    """An integer (not a bool) ``>= low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        fail(field, value, f"must be an integer >= {low}")


def to_dict(cfg: Any) -> Any:
    """A JSON-ready dict of a (nested) config dataclass."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, tuple):
        return [to_dict(v) for v in cfg]
    return cfg


def changed_fields(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted field, before, after) for every leaf where two ``to_dict`` trees differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after), key=str):
            out += changed_fields(before.get(key), after.get(key), f"{prefix}{key}.")
        return out
    return [] if before == after else [(prefix.rstrip("."), before, after)]


def from_dict(cls: type, data: dict) -> Any:
    """Rebuilds a (nested) config dataclass from ``to_dict`` output; unknown keys are errors."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for key, value in data.items():
        sub = dataclass_in(hints[key])
        if sub is not None and isinstance(value, dict):
            kwargs[key] = from_dict(sub, value)
        elif isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def to_json(cfg: Any) -> str:
    return json.dumps(to_dict(cfg), indent=2, sort_keys=True)


def dataclass_in(hint: Any) -> type | None:
    if dataclasses.is_dataclass(hint):
        return cast(type, hint)  # a type hint: a dataclass type, not an instance
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return cast(type, arg)
    return None


def field_paths(cls: type, prefix: str = "") -> list[str]:
    paths = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        paths.append(path)
        sub = dataclass_in(hints[f.name])
        if sub is not None:
            paths.extend(field_paths(sub, path + "."))
    return paths


# Unread fields ------------------------------------------------------------------------------


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
    dotted keys given on the command line, e.g. ``model.rope_theta``).

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
