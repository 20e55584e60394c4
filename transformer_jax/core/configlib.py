"""The config toolkit every config class uses: validation errors and checks, variants, dict round trips.

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


_KIND_WORDS = {int: "an integer", float: "a finite number", bool: "True or False", str: "a string"}


@functools.cache
def _scalar_fields(cls: type) -> tuple[tuple[str, type, bool], ...]:
    """``(name, type, optional)`` of the dataclass fields annotated ``int``, ``float``, ``bool`` or
    ``str``, alone or ``| None``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        base = [a for a in args if a is not type(None)]
        if len(base) == 1 and base[0] in _KIND_WORDS and len(args) <= 2:
            out.append((f.name, base[0], len(args) == 2))
    return tuple(out)


@functools.cache
def _group_fields(cls: type) -> tuple[tuple[str, type, bool], ...]:
    """``(name, class, optional)`` of the fields annotated with a `Config` class (a settings group
    or a variant family), alone or ``| None``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        base = [a for a in args if a is not type(None)]
        if len(base) == 1 and isinstance(base[0], type) and issubclass(base[0], Config):
            out.append((f.name, base[0], len(args) == 2))
    return tuple(out)


def _is(kind: type, value: Any) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_types(cfg: Any, prefix: str) -> None:
    """Every scalar field of the dataclass ``cfg`` holds its annotated type: ints are ints (not
    bools or 128.5), floats are finite numbers (NaN and inf refused), ``X | None`` also takes None;
    a settings group is an instance of its class. Errors name ``prefix.field``."""
    infinite_ok = {f.name for f in dataclasses.fields(cfg) if not f.metadata.get("rule", Rule()).finite}
    for name, kind, optional in _scalar_fields(type(cfg)):
        value = getattr(cfg, name)
        if name in infinite_ok and isinstance(value, float) and math.isinf(value):
            continue
        if not (_is(kind, value) or (optional and value is None)):
            fail(f"{prefix}.{name}", value, f"must be {_KIND_WORDS[kind]}" + (" or None" if optional else ""))
    for name, group, optional in _group_fields(type(cfg)):
        value = getattr(cfg, name)
        if not (isinstance(value, group) or (optional and value is None)):
            why = f"must be the settings group {group.__name__}" + (" or None" if optional else "")
            fail(f"{prefix}.{name}", value, why, f"give {group.__name__}(...), or set --set {prefix}.{name}.FIELD")


# Constraints declared on fields ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a field accepts beyond its annotated type: bounds (``ge``/``gt``/``le``/``lt``), one of
    ``choice``'s names, ``finite=False`` to let a float be inf (NaN never); ``hint``: what to do
    instead, added to a broken bound's message (``"None turns clipping off"``)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choice: Registry | tuple[str, ...] | None = None
    finite: bool = True
    hint: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` breaks the rule, or None (None values are the type check's business)."""
        if self.choice is not None:
            names = self.choice.names() if isinstance(self.choice, Registry) else tuple(self.choice)
            if value not in names:
                hint = did_you_mean(value, names)
                kind = self.choice.kind if isinstance(self.choice, Registry) else "choice"
                return f"unknown {kind}; {hint + ' ' if hint else ''}choose one of: {', '.join(names)}"
            return None
        bounds = [
            (self.ge, ">=", lambda b: value >= b),
            (self.gt, ">", lambda b: value > b),
            (self.le, "<=", lambda b: value <= b),
            (self.lt, "<", lambda b: value < b),
        ]
        broken = [f"{op} {bound}" for bound, op, ok in bounds if bound is not None and not ok(bound)]
        if broken:
            must = "must be " + " and ".join(f"{op} {b}" for b, op, _ in bounds if b is not None)
            return must if self.hint is None else f"{must}; {self.hint}"
        return None


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choice: Registry | tuple[str, ...] | None = None,
    finite: bool = True,
    hint: str | None = None,
) -> Any:
    """A dataclass field with its constraint declared (`Rule`), checked by `check_fields`:
    ``d_model: int = setting(128, ge=1)``, ``norm: str = setting("layernorm", choice=NORMS)``."""
    rule = Rule(ge=ge, gt=gt, le=le, lt=lt, choice=choice, finite=finite, hint=hint)
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"rule": rule})
    return dataclasses.field(default=default, metadata={"rule": rule})


@functools.cache
def literal_fields(cls: type) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``(name, allowed values)`` of the fields annotated ``Literal[...]`` (``| None``: None too)."""
    out = []
    for name, hint in typing.get_type_hints(cls).items():
        args = (hint,) if typing.get_origin(hint) is typing.Literal else typing.get_args(hint)
        allowed = tuple(v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a))
        if allowed and name in {f.name for f in dataclasses.fields(cls)}:
            out.append((name, allowed + ((None,) if type(None) in args else ())))
    return tuple(out)


def check_fields(cfg: Any, prefix: str) -> None:
    """The one generic check of a config dataclass: every scalar field holds its annotated type
    (`check_types`: ints are ints, floats finite, ``X | None`` also None), a ``Literal`` field one
    of its values, then every declared `Rule` (`setting`) holds. Errors name ``prefix.field``."""
    check_types(cfg, prefix)
    for name, allowed in literal_fields(type(cfg)):
        if (value := getattr(cfg, name)) not in allowed:
            names = [str(a) for a in allowed if a is not None]
            fix = f"{did_you_mean(value, names)} choose one of: {', '.join(names)}".lstrip()
            fail(f"{prefix}.{name}", value, f"unknown {name.replace('_', ' ')}", fix)
    for f in dataclasses.fields(cfg):
        rule = f.metadata.get("rule")
        value = getattr(cfg, f.name)
        if rule is None or value is None:
            continue
        why = rule.problem(value)
        if why:
            fail(f"{prefix}.{f.name}", value, why)


class Config:
    """Base of the config dataclasses: construction runs `check_fields` (the declared rules, at
    ``PATH``, e.g. "model.moe") and then ``check()``, the class's cross-field rules (small named
    functions beside the class that owns them). ``all_config_classes()`` lists every subclass."""

    PATH: typing.ClassVar[str] = ""

    def __post_init__(self) -> None:
        coerce_variants(self, self.PATH)
        check_fields(self, self.PATH)
        self.check()

    def check(self) -> None:
        """Cross-field rules; none by default."""


def all_config_classes() -> list[type[Config]]:
    """Every `Config` subclass defined so far (import the modules first)."""
    out: list[type[Config]] = []
    todo = list(Config.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return sorted(out, key=lambda c: f"{c.__module__}.{c.__qualname__}")


class Variant(Config):
    """One choice of a family of config classes chosen by name (e.g. the RoPE settings of
    ``model.position``): it has only the fields that choice reads. The family's base class holds
    the registry ``VARIANTS`` (kind -> class); `variant` registers a class and sets its ``kind``.
    In dicts a variant is ``{"kind": ..., **fields}``; on the command line ``model.position=rope``
    picks one (keeping its fields when it is already chosen) and ``model.position.theta=...`` sets
    a field of the chosen one."""

    kind: typing.ClassVar[str] = ""
    VARIANTS: typing.ClassVar[Registry]


_V = typing.TypeVar("_V", bound=type)


def variant(kind: str) -> typing.Callable[[_V], _V]:
    """Class decorator: registers a `Variant` subclass in its family's ``VARIANTS`` as ``kind``."""

    def add(cls: _V) -> _V:
        cls.VARIANTS.register(kind, cls)
        cls.kind = kind
        return cls

    return add


def family_of(hint: Any) -> type[Variant] | None:
    """The `Variant` family base named by a field's type hint (``RopeScaling | None`` included)."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and issubclass(candidate, Variant) and "VARIANTS" in vars(candidate):
            return candidate
    return None


@functools.cache
def _variant_fields(cls: type) -> tuple[tuple[str, type[Variant]], ...]:
    """``(name, family)`` of the fields of ``cls`` that hold a `Variant` (type hints resolved once)."""
    hints = typing.get_type_hints(cls)
    found = ((f.name, family_of(hints[f.name])) for f in dataclasses.fields(cls))
    return tuple((name, family) for name, family in found if family is not None)


def coerce_variants(cfg: Any, prefix: str) -> None:
    """A variant field given by its kind (``position="rope"``) holds that variant's defaults, as
    ``--set model.position=rope`` would; any other value that is not one of the family is an error."""
    for name, family in _variant_fields(type(cfg)):
        value = getattr(cfg, name)
        if value is None or isinstance(value, family):
            continue
        if isinstance(value, str) and value in family.VARIANTS:
            object.__setattr__(cfg, name, family.VARIANTS.get(value)())
            continue
        unknown_variant(family, value, f"{prefix}.{name}")


def unknown_variant(family: type[Variant], value: Any, where: str) -> typing.NoReturn:
    """The error for a value that names no variant of ``family``: the nearest names and all of them."""
    names = family.VARIANTS.names()
    fix = f"{did_you_mean(value, names) if isinstance(value, str) else ''} choose one of: {', '.join(names)}"
    fail(where, value, f"unknown {family.VARIANTS.kind}" if isinstance(value, str) else
         f"must be one of the {family.VARIANTS.kind} settings or names", fix.lstrip())  # fmt: skip


def check_int(field: str, value: Any, *, low: int) -> None:
    """An integer (not a bool) ``>= low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        fail(field, value, f"must be an integer >= {low}")


def to_dict(cfg: Any) -> Any:
    """A JSON-ready dict of a (nested) config dataclass."""
    if dataclasses.is_dataclass(cfg):
        fields = {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
        return {"kind": cfg.kind, **fields} if isinstance(cfg, Variant) else fields
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
        family = family_of(hints[key])
        if family is not None and isinstance(value, str | dict):
            kwargs[key] = variant_from(family, value, f"{cls.__name__}.{key}")
            continue
        sub = dataclass_in(hints[key])
        if sub is not None and isinstance(value, dict):
            kwargs[key] = from_dict(sub, value)
        elif isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def variant_from(family: type[Variant], value: str | dict, where: str) -> Any:
    """The variant of ``family`` a dict (``{"kind": ..., **fields}``) or a bare kind names."""
    data = {"kind": value} if isinstance(value, str) else dict(value)
    kind = data.pop("kind", None)
    if not isinstance(kind, str) or kind not in family.VARIANTS:
        unknown_variant(family, kind, f"{where}.kind")
    return from_dict(family.VARIANTS.get(kind), data)


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
        family = family_of(hints[f.name])
        subs = [family.VARIANTS.get(k) for k in family.VARIANTS] if family else [dataclass_in(hints[f.name])]
        for sub in subs:
            if sub is not None:
                paths.extend(p for p in field_paths(sub, path + ".") if p not in paths)
    return paths
