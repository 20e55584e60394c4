"""`transformer_jax.core.compiler`: per-backend XLA options on our jitted programs only."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.core import compiler

YNN = "xla_cpu_experimental_ynn_fusion_type"


def _fn(a, b):
    return jnp.tanh(a @ b)


def test_options_by_backend_and_switches(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv(compiler.DEFAULTS_ENV, raising=False)
    assert compiler.compiler_options("cpu") == {YNN: ""}
    assert compiler.compiler_options("gpu") is None and compiler.compiler_options("tpu") is None
    monkeypatch.setenv("XLA_FLAGS", f"--{YNN}=dot --xla_force_host_platform_device_count=8")
    assert compiler.compiler_options("cpu") is None, "a flag the user set in XLA_FLAGS wins"
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv(compiler.DEFAULTS_ENV, "0")
    assert compiler.compiler_options("cpu") is None


def test_jit_applies_the_options_to_its_program_only(monkeypatch):
    monkeypatch.delenv(compiler.DEFAULTS_ENV, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    a = jnp.asarray(np.random.default_rng(0).normal(size=(64, 64)), jnp.float32)
    ours = compiler.jit(_fn).lower(a, a).compile().as_text()
    plain = jax.jit(_fn).lower(a, a).compile().as_text()
    assert "__ynn_fusion" in plain, "XLA's default changed: revisit compiler.BACKEND_OPTIONS"
    assert "__ynn_fusion" not in ours
    np.testing.assert_allclose(compiler.jit(_fn)(a, a), jax.jit(_fn)(a, a), rtol=1e-5, atol=1e-5)


def test_jit_as_a_decorator_with_static_arguments():
    @functools.partial(compiler.jit, static_argnames=("power",))
    def f(x, *, power):
        return x**power

    assert f.__name__ == "f"
    assert float(f(jnp.float32(3.0), power=2)) == 9.0 and float(f(jnp.float32(2.0), power=3)) == 8.0
    assert compiler.jit()(lambda x: x + 1)(jnp.int32(1)) == 2


def test_donation_by_backend_and_switches(monkeypatch):
    monkeypatch.delenv(compiler.DONATE_ENV, raising=False)
    monkeypatch.delenv(compiler.DEFAULTS_ENV, raising=False)
    assert not compiler.donates("cpu") and compiler.donates("gpu") and compiler.donates("tpu")
    monkeypatch.setenv(compiler.DEFAULTS_ENV, "0")
    assert compiler.donates("cpu"), "with our defaults off, jit is plain jax.jit"
    monkeypatch.setenv(compiler.DONATE_ENV, "0")
    assert not compiler.donates("gpu")
    monkeypatch.delenv(compiler.DEFAULTS_ENV)
    monkeypatch.setenv(compiler.DONATE_ENV, "1")
    assert compiler.donates("cpu")


def test_donated_argument_survives_on_cpu_unless_forced(monkeypatch):
    monkeypatch.delenv(compiler.DEFAULTS_ENV, raising=False)
    for forced, deleted in (("", False), ("1", True)):
        monkeypatch.setenv(compiler.DONATE_ENV, forced)
        x = jnp.arange(1024, dtype=jnp.float32) + 0  # a fresh buffer, not a cached constant
        y = compiler.jit(lambda a: a * 2, donate_argnums=(0,))(x)
        assert float(y[3]) == 6.0
        assert x.is_deleted() is deleted
