"""On/off switches read from environment variables (no dependencies, safe before JAX is imported)."""

from __future__ import annotations

import os
from collections.abc import Mapping

FALSE = ("0", "false", "False")


def is_false(value: str) -> bool:
    """``value`` is one of `FALSE`."""
    return value in FALSE


def off(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """The switch ``name`` (on by default) is set to one of `FALSE` in ``environ`` (default ``os.environ``)."""
    return is_false((os.environ if environ is None else environ).get(name, "1"))
