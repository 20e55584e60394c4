"""A tiny name -> object registry, so variants are chosen by string in configs.

Adding a variant is one function plus one ``@REGISTRY.register("name")`` line; lookups of an
unknown name raise an error that lists the valid names and the closest match. An entry may declare
the settings it reads (``reads=("block_size",)``): a field that another entry of the same
registry reads and this one does not is "unread" when this entry is chosen, and setting it is an
error (``core.unread.check_reads``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
O = TypeVar("O")
_MISSING = object()


class Registry(Generic[T]):
    """Maps names to objects (functions, classes, specs) of one kind, e.g. "norm placement"."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._reads: dict[str, tuple[str, ...]] = {}

    @overload
    def register(self, name: str, *, reads: Iterable[str] = ()) -> Callable[[O], O]: ...  # keeps a class's own type
    @overload
    def register(self, name: str, obj: T, *, reads: Iterable[str] = ()) -> T: ...
    def register(self, name: str, obj: Any = _MISSING, *, reads: Iterable[str] = ()) -> Any:
        """Register ``obj`` (any value, None included) under ``name``; a decorator when omitted.
        ``reads``: the config fields (dotted, relative to the config that holds the choice) this
        entry reads beyond the choice itself."""

        def add(o: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = o
            self._reads[name] = tuple(reads)
            return o

        return add if obj is _MISSING else add(obj)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(unknown_name_message(self.kind, name, self.names())) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def reads(self, name: str) -> tuple[str, ...]:
        """The fields entry ``name`` declared it reads."""
        self.get(name)
        return self._reads[name]

    def governed(self) -> tuple[str, ...]:
        """Every field some entry reads: the ones a choice may leave unread."""
        return tuple(dict.fromkeys(f for fields in self._reads.values() for f in fields))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._items)})"


def did_you_mean(name: object, valid: tuple[str, ...] | list[str]) -> str:
    """ "did you mean 'post'?" for the closest valid names, or ""."""
    close = difflib.get_close_matches(str(name), list(valid), n=3, cutoff=0.5)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def unknown_name_message(kind: str, name: object, valid: tuple[str, ...] | list[str]) -> str:
    """ "unknown norm placement 'psot' (did you mean 'post'?); choose one of: post, pre, deepnorm"."""
    hint = did_you_mean(name, valid)
    return f"unknown {kind} {name!r}{f' ({hint})' if hint else ''}; choose one of: {', '.join(valid)}"
