"""``--set key.sub=value`` overrides of a frozen config dataclass.

Every override is applied (a repeated key warns, and the later value wins); all overrides of one
section are applied together, so ``data.dataset=text data.dataset.path=FILE`` is validated as a whole. An
optional group of settings (``model.moe``, ``train.log.wandb``) that is None is turned on with
``model.moe=on`` (its defaults) and off with ``model.moe=none``; setting ``model.moe.FIELD``
while the group is off is an error, never a silent switch.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
import warnings
from collections.abc import Sequence
from typing import Any

from transformer_jax.core import migration
from transformer_jax.core.configlib import (
    ConfigError,
    ConfigWarning,
    Variant,
    dataclass_in,
    family_of,
    field_paths,
    literal_fields,
    unknown_variant,
)
from transformer_jax.core.registry import Registry

ON_WORDS = ("on", "true", "default", "defaults")
_SELF = ""  # key of a group's own value ("model.moe=on") inside its node


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    """``{"train.steps": "500", ...}`` in the given order; a repeated key warns and the later one wins."""
    out: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.steps=500")
        key, text = (part.strip() for part in item.split("=", 1))
        if not key:
            raise ConfigError(f"--set {item!r}: the key before '=' is empty")
        if key in out and out[key] != text:
            warnings.warn(
                f"--set {key} is given twice ({out[key]!r}, then {text!r}); using {text!r}", ConfigWarning, stacklevel=3
            )
        out.pop(key, None)
        out[key] = text
    return out


def apply_overrides(cfg: Any, overrides: Sequence[str], *, replace: dict[str, Any] | None = None) -> Any:
    """``cfg`` with its top-level fields in ``replace`` replaced and then ``key.sub=value``
    overrides applied, validated once as a whole; unknown keys raise a ``ConfigError`` naming the
    nearest valid keys."""
    tree: dict = {}
    for key, text in parse_overrides(overrides).items():
        node: dict = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if isinstance(child, tuple):  # "model.moe=on" given before "model.moe.top_k=1"
                child = node[part] = {_SELF: child}
            node = child
        leaf = parts[-1]
        if isinstance(node.get(leaf), dict):
            node[leaf][_SELF] = (text, key)
        else:
            node[leaf] = (text, key)
    return _apply(cfg, tree, "", dict(replace or {}))


def _first_key(node) -> str:
    return node[1] if isinstance(node, tuple) else _first_key(next(iter(node.values())))


def _unknown_key(cfg: Any, node, prefix: str) -> ConfigError:
    full = _first_key(node)
    renamed = migration.renamed_key(full)
    if renamed:
        return ConfigError(f"config key {full!r} was renamed: {renamed} (CHANGELOG lists every renamed key)")
    if isinstance(cfg, Variant):
        return _not_in_variant(cfg, full, prefix)
    valid = [prefix + v for v in field_paths(type(cfg))]
    close = difflib.get_close_matches(full, valid, n=3, cutoff=0.6)
    if not close:
        by_leaf = {v.split(".")[-1]: v for v in valid}
        close = [by_leaf[c] for c in difflib.get_close_matches(full.split(".")[-1], list(by_leaf), n=3, cutoff=0.6)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ConfigError(f"unknown config key {full!r}{hint}")


def _not_in_variant(cfg: Variant, full: str, prefix: str) -> ConfigError:
    """A key the chosen variant does not have: name its fields and the variants that have it."""
    name = full[len(prefix) :].split(".")[0]
    family = cfg.VARIANTS
    owners = _owners(family, name)
    own = ", ".join(f.name for f in dataclasses.fields(typing.cast(Any, cfg))) or "none"
    where = prefix.rstrip(".")
    why = f"the {family.kind} {cfg.kind!r} has no setting {name!r} (its settings: {own})"
    if owners:
        why += f"; {name!r} is a setting of {', '.join(map(repr, owners))}: choose it with --set {where}={owners[0]}"
    elif nested := _nested_owner(cfg, name, where):
        why += f"; did you mean {nested}?"
    return ConfigError(f"--set {full}: {why}")


def _owners(family: Any, name: str) -> list[str]:
    """The kinds of ``family`` (a ``VARIANTS`` registry) that have a field ``name``."""
    return [k for k in family if name in {f.name for f in dataclasses.fields(family.get(k))}]


def _nested_owner(cfg: Any, name: str, where: str) -> str | None:
    """Where ``name`` lives one group down (``data.dataset.vocab_size`` -> the tokenizer's), with the
    variant to choose when the group's current one lacks it."""
    for f in dataclasses.fields(cfg):
        group = getattr(cfg, f.name)
        if not dataclasses.is_dataclass(group):
            continue
        key = f"{where}.{f.name}.{name}"
        if name in {g.name for g in dataclasses.fields(group)}:
            return key
        if isinstance(group, Variant) and (owners := _owners(group.VARIANTS, name)):
            return f"{key} (with --set {where}.{f.name}={owners[0]})"
    return None


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _same_choice(current: Any, new: Any) -> bool:
    """``model.moe=on`` or ``model.position=rope`` keeps what is already chosen (and its fields)."""
    return current is not None and new is not None and type(current) is type(new)


def _warn_dropped(old: Any, new: Any, path: str, *, set_now: tuple[str, ...]) -> None:
    """Switching a variant (``model.attention=local_global`` -> ``sliding_window``) starts from the new
    one's defaults: a setting both have, changed from its default in the old one and not set again
    now, is named (``qk_norm=True`` would otherwise be dropped without a word)."""
    if not (isinstance(old, Variant) and isinstance(new, Variant)):
        return
    shared = {f.name for f in dataclasses.fields(typing.cast(Any, new))} - set(set_now)
    dropped = [
        f"{path}.{f.name}={getattr(old, f.name)!r}"
        for f in dataclasses.fields(typing.cast(Any, old))
        if f.name in shared and getattr(old, f.name) not in (getattr(new, f.name), _default(f))
    ]
    if dropped:
        warnings.warn(
            f"--set {path}={new.kind} starts from {new.kind!r}'s defaults: {', '.join(dropped)} of {old.kind!r} "
            f"is not carried over; set it again to keep it",
            ConfigWarning,
            stacklevel=4,
        )


def _apply(cfg: Any, tree: dict, prefix: str, changes: dict[str, Any] | None = None) -> Any:
    hints = typing.get_type_hints(type(cfg))
    names = {f.name for f in dataclasses.fields(cfg)}
    changes = {} if changes is None else changes
    for name, node in tree.items():
        if name not in names:
            raise _unknown_key(cfg, node, prefix)
        if isinstance(node, tuple):
            value = parse_value(node[0], hints[name], node[1])
            current = changes.get(name, getattr(cfg, name))
            keep = dataclasses.is_dataclass(value) and _same_choice(current, value)
            if not keep:
                _warn_dropped(current, value, f"{prefix}{name}", set_now=())
            changes[name] = current if keep else value
            continue
        sub = changes.get(name, getattr(cfg, name))
        if _SELF in node:
            turned = parse_value(node[_SELF][0], hints[name], node[_SELF][1])
            node = {k: v for k, v in node.items() if k != _SELF}
            if not _same_choice(sub, turned):
                _warn_dropped(sub, turned, f"{prefix}{name}", set_now=tuple(node))
                sub = turned
            if not node:
                changes[name] = sub
                continue
        if sub is None:
            family = family_of(hints[name])
            if family is not None:
                kinds = ", ".join(family.VARIANTS.names())
                raise ConfigError(
                    f"--set {_first_key(node)}: {prefix}{name} is None (off), so its fields are not read; "
                    f"choose one with --set {prefix}{name}=KIND ({kinds}), then set its fields"
                )
            if dataclass_in(hints[name]) is None:
                raise ConfigError(f"{prefix}{name} has no sub-fields (while setting {_first_key(node)})")
            raise ConfigError(
                f"--set {_first_key(node)}: {prefix}{name} is None (off), so its fields are not read; "
                f"turn it on with --set {prefix}{name}=on (its defaults), then set its fields"
            )
        if not dataclasses.is_dataclass(sub):
            raise ConfigError(f"{_first_key(node)}: {prefix}{name} is a plain value, not a group of settings")
        changes[name] = _apply(sub, node, f"{prefix}{name}.")
    return dataclasses.replace(cfg, **changes)


def parse_value(text: str, hint: Any, path: str) -> Any:
    """Parses a ``--set`` value as the field's annotated type (int, float, bool, str, tuple, None,
    or ``on`` for an optional group of settings: its defaults)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    family = family_of(hint)
    if family is not None:
        if text.lower() in ("none", "null", "off") and type(None) in args:
            return None
        if text not in family.VARIANTS:
            unknown_variant(family, text, path)
        return family.VARIANTS.get(text)()
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null", "off") and type(None) in args:
            return None
        group = next((a for a in args if dataclasses.is_dataclass(a) and isinstance(a, type)), None)
        if group is not None and text.lower() in ON_WORDS:
            return group()
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return parse_value(text, arg, path)
            except (ConfigError, ValueError) as e:
                errors.append(str(e))
        raise ConfigError(f"{path}={text!r}: cannot parse as {hint} ({'; '.join(errors)})")
    if origin is tuple:
        items = [t for t in text.split(",") if t.strip()] if text.strip() not in ("", "()") else []
        item_hint = args[0] if args else str
        return tuple(parse_value(t.strip(), item_hint, path) for t in items)
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
        raise _group_given_a_value(typing.cast(type, hint), text, path)
    return text


def _group_given_a_value(group: type, text: str, path: str) -> ConfigError:
    """``model.init=xavier``: the group's fields, and the one whose choices hold the value."""
    names = [f.name for f in dataclasses.fields(group)]
    owner = next((name for name, allowed in _choices(group) if text in allowed), None)
    hint = f"; did you mean {path}.{owner}={text}?" if owner else f", e.g. {path}.{names[0]}=..."
    return ConfigError(f"{path}={text}: {path} is a group of settings (its fields: {', '.join(names)}){hint}")


def _choices(group: type) -> list[tuple[str, tuple[Any, ...]]]:
    """``(field, allowed values)`` of ``group``'s fields with a closed set of values."""
    out = list(literal_fields(group))
    for f in dataclasses.fields(group):
        choice = getattr(f.metadata.get("rule"), "choice", None)
        if choice is not None:
            out.append((f.name, tuple(choice.names() if isinstance(choice, Registry) else choice)))
    return out
