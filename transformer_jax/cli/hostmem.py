"""glibc ``malloc`` settings for training on XLA:CPU, applied by the command line.

XLA:CPU allocates one temporary buffer per execution of a jitted program and frees it afterwards.
A train step's buffer is large: 40 MB for torch_gpt.py's ``small`` config, 547 MB for ``medium``.
glibc serves such blocks with a fresh ``mmap`` and gives them back with ``munmap``, so every step
faults its temporaries in again, one 4 KiB page at a time: 9,900 page faults per ``small`` step and
138,000 per ``medium`` step.

Two settings stop this:

- `tune_malloc` (``mallopt``, takes effect at once): no ``mmap`` for blocks that fit a heap, no
  trimming of freed memory, and 64 MB of padding when a heap grows, so that glibc keeps a
  per-thread heap alive once its block is freed. The 40 MB buffer is then reused and faults stop.
- `reexec_with_hugepages` (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, read only at process
  start): blocks larger than a per-thread heap (64 MB) are still mapped per step, but now with
  transparent huge pages, 512 times fewer faults.

Measured in docs/performance.md ("What made it faster").

The cost: freed memory stays with the process (its resident size does not shrink after a peak).
``TRANSFORMER_JAX_MALLOC=0`` turns both off. Other C libraries, and hosts where JAX computes on a
GPU or TPU (`runs_on_cpu`), are left alone.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import platform
import sys

from transformer_jax.core import envflags

ENV = "TRANSFORMER_JAX_MALLOC"
TUNABLE = "glibc.malloc.hugetlb"
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
TOP_PAD = 64 << 20
TRIM_THRESHOLD = 2**31 - 1


_ACCELERATORS = (  # (plugin modules, device files): JAX runs there when both are present
    (("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13", "jax_plugins.xla_rocm"), ("/dev/nvidia[0-9]*", "/dev/kfd")),
    (("libtpu",), ("/dev/accel*", "/dev/vfio/[0-9]*")),
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def runs_on_cpu(environ=None) -> bool:
    """Whether JAX will compute on the CPU here, decided without starting it: the first of
    ``JAX_PLATFORMS`` when set, else no accelerator plugin installed with its device present."""
    environ = os.environ if environ is None else environ
    first = environ.get("JAX_PLATFORMS", "").split(",")[0].strip()
    if first:
        return first == "cpu"
    for modules, devices in _ACCELERATORS:
        if any(_installed(m) for m in modules) and any(glob.glob(d) for d in devices):
            return False
    return True


def applies(environ=None) -> bool:
    """True on Linux with glibc when JAX computes on the CPU (`runs_on_cpu`; the settings were
    measured for XLA:CPU's allocations only), unless ``TRANSFORMER_JAX_MALLOC=0``."""
    if not envflags.switch(ENV, environ):
        return False
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc" and runs_on_cpu(environ)


def tune_malloc() -> bool:
    """Set glibc's ``M_MMAP_MAX`` = 0, ``M_TRIM_THRESHOLD`` = 2 GiB - 1 and ``M_TOP_PAD`` = 64 MiB
    for this process; returns whether they were set."""
    if not applies():
        return False
    libc = ctypes.CDLL(None)
    ok = [libc.mallopt(M_MMAP_MAX, 0), libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD), libc.mallopt(M_TOP_PAD, TOP_PAD)]
    return all(r == 1 for r in ok)


def hugepage_env(environ=None) -> dict[str, str] | None:
    """``environ`` with ``glibc.malloc.hugetlb=1`` added to ``GLIBC_TUNABLES`` (other tunables
    kept), or None when nothing is to change (already set by anyone, or `applies` is False)."""
    environ = dict(os.environ if environ is None else environ)
    tunables = environ.get("GLIBC_TUNABLES", "")
    if not applies(environ) or TUNABLE in tunables:
        return None
    environ["GLIBC_TUNABLES"] = f"{tunables}:{TUNABLE}=1" if tunables else f"{TUNABLE}=1"
    return environ


def reexec_with_hugepages(argv: list[str]) -> None:
    """Replace this process by ``python -m transformer_jax *argv`` with `hugepage_env`, unless that
    is None. Call it first thing in a command-line entry point, never from library code."""
    env = hugepage_env()
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "transformer_jax", *argv], env)
