"""Every ``TRANSFORMER_JAX_*`` environment variable in one table (`VARIABLES`), and one parser of
on/off switches (`switch`): ``1``, ``true``, ``yes``, ``on`` are on; ``0``, ``false``, ``no``, ``off``
are off (any case); unset or empty is the default; anything else is an error naming the variable.
No dependencies, so it is safe before JAX is imported. ``docs/environment.md`` is `markdown()`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


class SwitchError(ValueError):
    """A switch set to a value that is neither on nor off."""


@dataclasses.dataclass(frozen=True)
class Variable:
    """``default``: a switch's value when unset (None: decided by the code, e.g. per platform);
    ``switch=False`` marks a variable that carries a value (a path, a number) instead."""

    name: str
    doc: str
    default: bool | None = False
    switch: bool = True


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("TRANSFORMER_JAX_DEBUG", "keep the traceback of a user error (exit 2) instead of one line"),
        Variable(
            "TRANSFORMER_JAX_MALLOC",
            "the command line's glibc malloc tuning (huge pages, no mmap for large blocks) where JAX "
            "computes on the CPU",
            default=True,
        ),
        Variable(
            "TRANSFORMER_JAX_XLA_DEFAULTS",
            "the project's XLA options for the platform compiled for (`core.compiler`); off: plain jax.jit",
            default=True,
        ),
        Variable(
            "TRANSFORMER_JAX_DONATE",
            "donate the train state to the step; unset: where the platform compiled for supports it",
            default=None,
        ),
        Variable("TRANSFORMER_JAX_SMOKE", "notebooks at tiny sizes with 2 seeds (what CI runs)"),
        Variable("TRANSFORMER_JAX_REUSE_RUNS", "a notebook reads back a finished run of the same config"),
        Variable("TRANSFORMER_JAX_RETRAIN", "a notebook retrains every run instead of reading committed ones"),
        Variable("TRANSFORMER_JAX_RUNS", "folder of the notebooks' runs (unset: the system temp folder)", None, False),
        Variable(
            "TRANSFORMER_JAX_RESULTS",
            "folder of the notebooks' FULL results and run summaries (unset: experiments/results of the checkout)",
            None,
            False,
        ),
        Variable(
            "TRANSFORMER_JAX_SOURCE",
            "the notebooks' install cell on Colab: pip source (git URL, wheel) to install instead of the repository",
            None,
            False,
        ),
        Variable("TRANSFORMER_JAX_COORDINATOR", "host:port of process 0 for a multi-process run", None, False),
        Variable("TRANSFORMER_JAX_NUM_PROCESSES", "number of processes of a multi-process run", None, False),
        Variable("TRANSFORMER_JAX_PROCESS_ID", "this process's index in a multi-process run", None, False),
        Variable("TRANSFORMER_JAX_LOCAL_DEVICES", "CPU devices faked per process (tests, laptops)", None, False),
        Variable("TRANSFORMER_JAX_HEARTBEAT_S", "seconds before a silent process counts as dead", None, False),
    )
}


def _spec(name: str, *, switch: bool) -> Variable:
    spec = VARIABLES.get(name)
    if spec is None or spec.switch != switch:
        kind = "switch" if switch else "value variable"
        raise KeyError(f"{name} is not a {kind} of core.envflags.VARIABLES")
    return spec


def switch(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """The on/off switch ``name`` read from ``environ`` (default ``os.environ``)."""
    spec = _spec(name, switch=True)
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return spec.default
    if raw.lower() in ON:
        return True
    if raw.lower() in OFF:
        return False
    raise SwitchError(f"{name}={raw!r} is neither on nor off: set it to 1 (on) or 0 (off), or unset it")


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value variable ``name`` (None when unset or empty)."""
    _spec(name, switch=False)
    return (os.environ if environ is None else environ).get(name, "").strip() or None


def check_switches(environ: Mapping[str, str] | None = None) -> None:
    """Raises `SwitchError` for the first switch set to a value that is neither on nor off."""
    for spec in VARIABLES.values():
        if spec.switch:
            switch(spec.name, environ)


def markdown() -> str:
    """The table of `VARIABLES` as Markdown."""
    lines = ["| variable | kind | default | what it does |", "| --- | --- | --- | --- |"]
    for v in VARIABLES.values():
        default = {True: "on", False: "off", None: "auto"}[v.default] if v.switch else "unset"
        lines.append(f"| `{v.name}` | {'switch' if v.switch else 'value'} | {default} | {v.doc} |")
    return "\n".join(lines)
