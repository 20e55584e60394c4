"""Frozen-dataclass config helpers: validation errors, dict round trips, ``--set`` overrides.

Pure Python (no JAX); every config class in the package builds on these.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from typing import Any

from transformer_jax.registry import Registry


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the fix."""


def fail(field: str, value: Any, why: str, fix: str = "") -> typing.NoReturn:
    raise ConfigError(f"{field}={value!r}: {why}" + (f"; {fix}" if fix else ""))


def check_choice(field: str, value: str, registry: Registry | typing.Iterable[str], kind: str | None = None) -> None:
    names = registry.names() if isinstance(registry, Registry) else tuple(registry)
    if value not in names:
        close = difflib.get_close_matches(str(value), list(names), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        fail(field, value, f"unknown {kind or field.split('.')[-1]}", f"{hint}choose one of: {', '.join(names)}")


def check_positive(field: str, value: float | int, *, allow_zero: bool = False) -> None:
    if value is None or value < 0 or (value == 0 and not allow_zero):
        fail(field, value, "must be " + ("non-negative" if allow_zero else "positive"))


def check_range(field: str, value: float, lo: float, hi: float, *, hi_inclusive: bool = False) -> None:
    if not (lo <= value < hi or (hi_inclusive and value == hi)):
        fail(field, value, f"must be in [{lo}, {hi}{']' if hi_inclusive else ')'}")


def to_dict(cfg: Any) -> Any:
    """A JSON-ready dict of a (nested) config dataclass."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, tuple):
        return [to_dict(v) for v in cfg]
    return cfg


def from_dict(cls: type, data: dict) -> Any:
    """Rebuilds a (nested) config dataclass from ``to_dict`` output; unknown keys are errors."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for key, value in data.items():
        sub = _dataclass_in(hints[key])
        if sub is not None and isinstance(value, dict):
            kwargs[key] = from_dict(sub, value)
        elif isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def to_json(cfg: Any) -> str:
    return json.dumps(to_dict(cfg), indent=2, sort_keys=True)


def _dataclass_in(hint: Any) -> type | None:
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _field_paths(cls: type, prefix: str = "") -> list[str]:
    paths = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        paths.append(path)
        sub = _dataclass_in(hints[f.name])
        if sub is not None:
            paths.extend(_field_paths(sub, path + "."))
    return paths


def _parse_value(text: str, hint: Any, path: str) -> Any:
    """Parses a ``--set`` value as the field's annotated type (int, float, bool, str, tuple, None)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _parse_value(text, arg, path)
            except (ConfigError, ValueError) as e:
                errors.append(str(e))
        raise ConfigError(f"{path}={text!r}: cannot parse as {hint} ({'; '.join(errors)})")
    if origin is tuple:
        items = [t for t in text.split(",") if t.strip()] if text.strip() not in ("", "()") else []
        item_hint = args[0] if args else str
        return tuple(_parse_value(t.strip(), item_hint, path) for t in items)
    if hint is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{path}={text!r}: expected a boolean (true/false)")
    if hint is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{path}={text!r}: expected an integer") from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{path}={text!r}: expected a number") from None
    if hint is str or hint is Any:
        return text
    if dataclasses.is_dataclass(hint):
        raise ConfigError(f"{path} is a group of settings; set its fields, e.g. {path}.<field>=...")
    return text


def apply_overrides(cfg: Any, overrides: typing.Sequence[str]) -> Any:
    """Returns ``cfg`` with ``key.sub=value`` overrides applied.

    All overrides of one config section are applied together (so ``data.dataset=text
    data.path=FILE`` is validated as a whole); unknown keys raise a ``ConfigError`` naming the
    nearest valid keys; a later value for the same key wins.
    """
    tree: dict = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.steps=500")
        key, text = (part.strip() for part in item.split("=", 1))
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {part} was also given a plain value")
        if isinstance(node.get(parts[-1]), dict):
            raise ConfigError(f"--set {key}: {key} is a group of settings; set its fields, e.g. {key}.<field>=...")
        node[parts[-1]] = (text, key)
    return _apply(cfg, tree, "")


def _first_key(node) -> str:
    return node[1] if isinstance(node, tuple) else _first_key(next(iter(node.values())))


def _apply(cfg: Any, tree: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(type(cfg))
    names = {f.name for f in dataclasses.fields(cfg)}
    changes = {}
    for name, node in tree.items():
        if name not in names:
            full = _first_key(node)
            valid = [prefix + v for v in _field_paths(type(cfg))]
            close = difflib.get_close_matches(full, valid, n=3, cutoff=0.6)
            if not close:
                by_leaf = {v.split(".")[-1]: v for v in valid}
                close = [by_leaf[c] for c in difflib.get_close_matches(full.split(".")[-1], list(by_leaf), n=3,
                                                                        cutoff=0.6)]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"unknown config key {full!r}{hint}")
        if isinstance(node, tuple):
            changes[name] = _parse_value(node[0], hints[name], node[1])
            continue
        sub = getattr(cfg, name)
        if sub is None:
            sub_cls = _dataclass_in(hints[name])
            if sub_cls is None:
                raise ConfigError(f"{prefix}{name} has no sub-fields (while setting {_first_key(node)})")
            sub = sub_cls()
        if not dataclasses.is_dataclass(sub):
            raise ConfigError(f"{_first_key(node)}: {prefix}{name} is a plain value, not a group of settings")
        changes[name] = _apply(sub, node, f"{prefix}{name}.")
    return dataclasses.replace(cfg, **changes)
