"""Activations and the FFN against numpy formulas; dropout (also an element-wise op) behaviour."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.activations import FFN_ACTIVATIONS, ffn, gelu, gelu_tanh, relu, silu
from transformer_jax.ops.dropout import dropout

X = np.linspace(-6.0, 6.0, 49, dtype=np.float32).reshape(7, 7)
_erf = np.vectorize(math.erf)


def _np_act(name, x):
    x = np.asarray(x, np.float64)
    return {
        "relu": lambda: np.maximum(x, 0.0),
        "gelu": lambda: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
        "gelu_tanh": lambda: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "silu": lambda: x / (1 + np.exp(-x)),
    }[name]()


class ActivationTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("relu", "gelu", "gelu_tanh", "silu")
    def test_against_numpy(self, name):
        fn = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu}[name]
        out = self.variant(fn)(X)
        chex.assert_shape(out, X.shape)
        chex.assert_type(out, jnp.float32)
        np.testing.assert_allclose(out, _np_act(name, X), atol=1e-6, rtol=1e-6)

    def test_gelu_exact_differs_from_tanh(self):
        assert np.max(np.abs(gelu(X) - gelu_tanh(X))) > 1e-4
        chex.assert_type(gelu(jnp.asarray(X, jnp.bfloat16)), jnp.bfloat16)

    def test_registry(self):
        assert set(FFN_ACTIVATIONS.names()) >= {"relu", "gelu", "gelu_tanh", "swiglu", "geglu"}
        assert FFN_ACTIVATIONS.get("swiglu").activation is silu and FFN_ACTIVATIONS.get("swiglu").gated
        assert FFN_ACTIVATIONS.get("geglu").activation is gelu and FFN_ACTIVATIONS.get("geglu").gated
        assert not FFN_ACTIVATIONS.get("relu").gated


class FfnTest(chex.TestCase):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w_in, w_gate = rng.standard_normal((2, 4, 6)).astype(np.float32)
    w_out = rng.standard_normal((6, 4)).astype(np.float32)
    b_in, b_out = rng.standard_normal(6).astype(np.float32), rng.standard_normal(4).astype(np.float32)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("relu", "gelu", "gelu_tanh")
    def test_plain(self, name):
        fn = self.variant(functools.partial(ffn, activation=name))
        out = fn(self.x, self.w_in, self.w_out, b_in=self.b_in, b_out=self.b_out)
        chex.assert_shape(out, self.x.shape)
        x = self.x.astype(np.float64)
        ref = _np_act(name, x @ self.w_in + self.b_in) @ self.w_out + self.b_out
        np.testing.assert_allclose(out, ref, atol=1e-4)

    def test_relu_is_the_original(self):
        out = ffn(self.x, self.w_in, self.w_out, activation="relu", b_in=self.b_in, b_out=self.b_out)
        ref = np.maximum(0, self.x @ self.w_in + self.b_in) @ self.w_out + self.b_out
        np.testing.assert_allclose(out, ref, atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(("swiglu", "silu"), ("geglu", "gelu"))
    def test_gated(self, name, act):
        fn = self.variant(functools.partial(ffn, activation=name))
        out = fn(self.x, self.w_in, self.w_out, w_gate=self.w_gate)
        x = self.x.astype(np.float64)
        ref = (_np_act(act, x @ self.w_gate) * (x @ self.w_in)) @ self.w_out
        np.testing.assert_allclose(out, ref, atol=1e-4)

    def test_errors(self):
        with pytest.raises(ValueError, match="needs w_gate"):
            ffn(self.x, self.w_in, self.w_out, activation="swiglu")
        with pytest.raises(ValueError, match="not gated"):
            ffn(self.x, self.w_in, self.w_out, activation="relu", w_gate=self.w_gate)
        with pytest.raises(KeyError, match="did you mean 'swiglu'"):
            ffn(self.x, self.w_in, self.w_out, activation="swiglo")


class DropoutTest(chex.TestCase):
    def test_identity_when_deterministic(self):
        x = jnp.asarray(X)
        assert dropout(x, 0.3, None) is x
        assert dropout(x, 0.0, jax.random.key(0)) is x

    @chex.variants(with_jit=True, without_jit=True)
    def test_keeps_mean_and_scales_survivors(self):
        rate = 0.25
        x = jnp.full((256, 256), 2.0, jnp.float32)
        out = np.asarray(self.variant(functools.partial(dropout, rate=rate))(x, key=jax.random.key(1)))
        chex.assert_shape(out, x.shape)
        kept = out != 0
        np.testing.assert_allclose(out[kept], 2.0 / (1 - rate), rtol=1e-6)
        assert abs(1 - kept.mean() - rate) < 0.01
        assert abs(out.mean() - 2.0) < 0.03

    def test_key_dependence_and_dtype(self):
        x = jnp.ones((64,), jnp.bfloat16)
        a, b = dropout(x, 0.5, jax.random.key(0)), dropout(x, 0.5, jax.random.key(1))
        chex.assert_type(a, jnp.bfloat16)
        assert not np.array_equal(a, b)
        np.testing.assert_array_equal(a, dropout(x, 0.5, jax.random.key(0)))

    @parameterized.parameters(1.0, -0.1, 1.5)
    def test_bad_rate(self, rate):
        with pytest.raises(ValueError, match="rate="):
            dropout(jnp.ones(3), rate, jax.random.key(0))
