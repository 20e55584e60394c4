"""Notebooks run under ``pytest --nbmake`` in SMOKE mode (tiny sizes, results in a temporary
folder); kernels inherit this environment, including the suite's persistent compilation cache."""

import os

import pytest

os.environ.setdefault("TRANSFORMER_JAX_SMOKE", "1")
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.environ.get(
        "TRANSFORMER_JAX_TEST_CACHE",
        os.path.join(os.path.expanduser("~"), ".cache", "transformer_jax", "jax_test_cache"),
    ),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The kernel inherits this process's environment; when the test suite shares the process,
    tests/conftest.py has forced 8 host devices there, which the notebooks must not see."""
    saved = os.environ.get("XLA_FLAGS")
    if saved is not None:
        os.environ["XLA_FLAGS"] = " ".join(f for f in saved.split() if "force_host_platform_device_count" not in f)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["XLA_FLAGS"] = saved
