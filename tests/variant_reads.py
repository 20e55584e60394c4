"""Which fields of config variants a piece of code reads: the check behind "a variant has no field it
does not read" (issue 43). Reads by validation (a config's construction), by dataclass machinery
(``__eq__``, ``__hash__``, ``replace``) and by configlib (``to_dict``) do not count: only code that
consumes the setting."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from transformer_jax.core import configlib, overrides, unread

_NOT_CONSUMERS = (  # dataclass machinery, validation and the walks over every field
    "<string>",
    str(pathlib.Path(dataclasses.__file__)),
    str(pathlib.Path(configlib.__file__)),
    str(pathlib.Path(unread.__file__)),
    str(pathlib.Path(overrides.__file__)),
)


@contextlib.contextmanager
def recorded_reads(classes: Iterable[type]) -> Iterator[set[tuple[type, str]]]:
    """Within the block, ``(class, field)`` for each field read on an instance of ``classes`` (exact
    classes, not subclasses) by consuming code."""
    reads: set[tuple[type, str]] = set()
    validating = [0]
    saved: list[tuple[type, str, Any]] = []

    def patch(cls: type, name: str, value: Any) -> None:
        saved.append((cls, name, cls.__dict__.get(name, _MISSING)))
        setattr(cls, name, value)

    base_post_init = configlib.Config.__post_init__

    def post_init(self: Any) -> None:
        validating[0] += 1
        try:
            base_post_init(self)
        finally:
            validating[0] -= 1

    patch(configlib.Config, "__post_init__", post_init)
    for cls in set(classes):
        names = frozenset(f.name for f in dataclasses.fields(cls))
        inherited = cls.__getattribute__

        def get(self: Any, name: str, _cls=cls, _names=names, _get=inherited) -> Any:
            if name in _names and type(self) is _cls and not validating[0]:
                caller = sys._getframe(1).f_code.co_filename
                if caller not in _NOT_CONSUMERS:
                    reads.add((_cls, name))
            return _get(self, name)

        patch(cls, "__getattribute__", get)
    try:
        yield reads
    finally:
        for cls, name, old in reversed(saved):
            if old is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, old)


_MISSING = object()


def unread_fields(consume: Callable[[], Any], config: Any) -> list[str]:
    """The fields of ``config`` (a dataclass instance) that ``consume()`` never reads."""
    cls = type(config)
    with recorded_reads([cls]) as reads:
        consume()
    return sorted(f.name for f in dataclasses.fields(cls) if (cls, f.name) not in reads)
