"""`transformer_jax.cli.hostmem`: glibc malloc settings that stop per-step page faults of XLA:CPU."""

import os
import subprocess
import sys
import textwrap

import pytest

from transformer_jax.cli import hostmem

glibc = pytest.mark.skipif(not hostmem.applies({}), reason="needs Linux with glibc")

# A worker thread allocates, touches and frees a 40 MB block (XLA's temp buffer for torch_gpt.py's
# small train step) again and again, like one execution per step; prints the minor page faults of
# the last 10 rounds.
_FAULTS = textwrap.dedent("""
    import ctypes, resource, sys, threading
    from transformer_jax.cli import hostmem
    if sys.argv[1] == "tuned":
        assert hostmem.tune_malloc()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n = 40 << 20
    out = []
    def work():
        for i in range(15):
            if i == 5:
                out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
            p = libc.malloc(n)
            ctypes.memset(p, 1, n)
            libc.free(p)
        out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
    t = threading.Thread(target=work)
    t.start(); t.join()
    print(out[1] - out[0])
""")


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hostmem.ENV)}
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@glibc
def test_tuned_malloc_reuses_a_freed_40mb_block_instead_of_faulting_it_in_again():
    plain, tuned = _faults("plain"), _faults("tuned")
    assert plain > 10 * 9000, f"glibc maps and faults the block in every round ({plain} faults in 10 rounds)"
    assert tuned < 500, f"{tuned} faults in 10 rounds after tune_malloc"


def test_hugepage_env_adds_the_tunable_once_and_keeps_others():
    if not hostmem.applies({}):
        assert hostmem.hugepage_env({}) is None
        return
    assert hostmem.hugepage_env({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    env = hostmem.hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "A": "b"})
    assert env == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "A": "b"}
    assert hostmem.hugepage_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None, "the user's choice wins"
    assert hostmem.hugepage_env({hostmem.ENV: "0"}) is None
    assert not hostmem.applies({hostmem.ENV: "0"})


def test_reexec_runs_the_same_command_under_python_m(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execve", lambda path, args, env: calls.append((path, args, env)))
    monkeypatch.setattr(hostmem, "applies", lambda environ=None: True)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    hostmem.reexec_with_hugepages(["bench", "train", "--cfg", "small"])
    assert calls == [
        (
            sys.executable,
            [sys.executable, "-m", "transformer_jax", "bench", "train", "--cfg", "small"],
            {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
        )
    ]
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    hostmem.reexec_with_hugepages(["train"])
    assert len(calls) == 1, "no second exec once the tunable is set"


def test_malloc_tuning_only_where_jax_computes_on_the_cpu(monkeypatch):
    """Measured for XLA:CPU alone: a GPU or TPU host (plugin and device present) is left alone."""
    monkeypatch.setattr(hostmem, "_installed", lambda module: module == "jax_plugins.xla_cuda12")
    monkeypatch.setattr(hostmem.glob, "glob", lambda pattern: ["/dev/nvidia0"] if "nvidia" in pattern else [])
    assert not hostmem.runs_on_cpu({}) and hostmem.hugepage_env({}) is None
    assert hostmem.runs_on_cpu({"JAX_PLATFORMS": "cpu"}), "JAX_PLATFORMS decides first"
    assert not hostmem.runs_on_cpu({"JAX_PLATFORMS": "tpu,cpu"})
    monkeypatch.setattr(hostmem.glob, "glob", lambda pattern: [])
    assert hostmem.runs_on_cpu({}), "a plugin without its device: JAX falls back to the CPU"
