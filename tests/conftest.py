"""Test-suite setup: 8 host CPU devices and a persistent compilation cache, before JAX loads."""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import pytest  # noqa: E402

from tests.missing_imports import pytest_terminal_summary  # noqa: E402, F401 - names skipped interop modules

_CACHE = os.environ.get(
    "TRANSFORMER_JAX_TEST_CACHE",
    os.path.join(os.path.expanduser("~"), ".cache", "transformer_jax", "jax_test_cache"),
)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(scope="session", autouse=True)
def _eight_devices():
    assert jax.device_count() == 8, "tests expect 8 host CPU devices (see tests/conftest.py)"
