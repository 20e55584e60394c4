"""XLA compiler options for the package's jitted programs, chosen per platform compiled for.

``jit(fun, **jit_kwargs)`` is ``jax.jit`` with the `compiler_options` of the platform it is compiled
for (``core.targets.platform()``: the running backend, or the target of ``compile --target``).
They go to that one program only (``jax.jit(compiler_options=...)``), never to the process: a
project that imports our modules keeps its own XLA settings.

CPU: YNNPACK dot fusions off (``xla_cpu_experimental_ynn_fusion_type=""``), so dots run on XLA's
own CPU GEMMs: YNNPACK pays a fixed cost per call that small and batched GEMMs feel. A flag named
in ``XLA_FLAGS`` is left to it.

Buffer donation (``donate_argnums``) is kept on accelerators, where it halves the train state's
memory, and dropped on CPU (`donates`), where the compiled step began by copying donated
parameters that it reads inside control flow (the MoE tile loops) and so ran slower. On CPU the
old and the new train state are thus both alive during a step. ``TRANSFORMER_JAX_DONATE=1`` (or
``0``) forces donation on (off) everywhere.

The measurements behind both choices are in docs/performance.md ("What made it faster",
"Mixture-of-Experts step cost").

``TRANSFORMER_JAX_XLA_DEFAULTS=0`` turns all of this off: `jit` is then plain ``jax.jit``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import jax

from transformer_jax.core import envflags, targets

DEFAULTS_ENV = "TRANSFORMER_JAX_XLA_DEFAULTS"
DONATE_ENV = "TRANSFORMER_JAX_DONATE"
NO_DONATION_BACKENDS = ("cpu",)
BACKEND_OPTIONS: dict[str, dict[str, str]] = {
    "cpu": {"xla_cpu_experimental_ynn_fusion_type": ""},
}


def compiler_options(backend: str | None = None) -> dict[str, str] | None:
    """The options for ``backend`` (default: the platform compiled for, ``core.targets.platform()``),
    less those set in ``XLA_FLAGS``; None when there are none or ``TRANSFORMER_JAX_XLA_DEFAULTS=0``."""
    if not envflags.switch(DEFAULTS_ENV):
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    options = {k: v for k, v in BACKEND_OPTIONS.get(backend or targets.platform(), {}).items() if f"--{k}" not in flags}
    return options or None


def donates(backend: str | None = None) -> bool:
    """Whether `jit` keeps ``donate_argnums`` on ``backend`` (default: ``core.targets.platform()``)."""
    forced = envflags.switch(DONATE_ENV)
    if forced is not None:
        return forced
    if not envflags.switch(DEFAULTS_ENV):
        return True
    return (backend or targets.platform()) not in NO_DONATION_BACKENDS


P = ParamSpec("P")
R = TypeVar("R")


class _Jit(Generic[P, R]):
    """``jax.jit`` built on first use for each platform compiled for (importing must not start a
    backend; ``compile --target`` compiles the same step for another platform)."""

    def __init__(self, fun: Callable[P, R], kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun, self._kwargs, self._jitted = fun, kwargs, {}

    @property
    def jitted(self):
        platform = targets.platform()
        if platform not in self._jitted:
            kwargs = (
                self._kwargs
                if donates(platform)
                else {k: v for k, v in self._kwargs.items() if k not in ("donate_argnums", "donate_argnames")}
            )
            self._jitted[platform] = jax.jit(self._fun, compiler_options=compiler_options(platform), **kwargs)
        return self._jitted[platform]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self.jitted.lower(*args, **kwargs)


@overload
def jit(fun: None = None, **jit_kwargs: Any) -> Callable[[Callable[P, R]], _Jit[P, R]]: ...
@overload
def jit(fun: Callable[P, R], **jit_kwargs: Any) -> _Jit[P, R]: ...
def jit(fun: Callable | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit(fun, **jit_kwargs)`` with this backend's `compiler_options` (and donation only where
    `donates`); usable as a decorator, also as ``functools.partial(jit, static_argnames=...)``."""
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    return _Jit(fun, jit_kwargs)
