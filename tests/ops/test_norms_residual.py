"""Norms against numpy, norm placements on a hand-made layer, DeepNet constants by hand."""

import functools

import chex
import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.norms import NORMS, layer_norm, rms_norm
from transformer_jax.ops.residual import (
    PLACEMENTS,
    deepnorm_constants,
    placement_constants,
)


def _eqns(jaxpr) -> list:
    """The equations of ``jaxpr`` and of the jaxprs nested in it (jit, custom derivatives)."""
    out = []
    for e in jaxpr.eqns:
        out.append(e)
        for sub in jax_core.jaxprs_in_params(e.params):
            out += _eqns(sub)
    return out


def _np_layer_norm(x, scale=None, bias=None, eps=1e-5):
    x = np.asarray(x, np.float64)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    y = y if scale is None else y * scale
    return y if bias is None else y + bias


def _np_rms_norm(x, scale=None, eps=1e-6):
    x = np.asarray(x, np.float64)
    y = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + eps)
    return y if scale is None else y * scale


class NormTest(chex.TestCase):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 6)) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(6).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)

    @chex.variants(with_jit=True, without_jit=True)
    def test_layer_norm(self):
        out = self.variant(layer_norm)(self.x, self.scale, self.bias)
        chex.assert_shape(out, self.x.shape)
        np.testing.assert_allclose(out, _np_layer_norm(self.x, self.scale, self.bias), atol=1e-5)
        np.testing.assert_allclose(self.variant(layer_norm)(self.x), _np_layer_norm(self.x), atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_rms_norm(self):
        out = self.variant(rms_norm)(self.x, self.scale)
        np.testing.assert_allclose(out, _np_rms_norm(self.x, self.scale), atol=1e-5)
        np.testing.assert_allclose(self.variant(rms_norm)(self.x), _np_rms_norm(self.x), atol=1e-5)

    def test_eps(self):
        x = np.full((1, 4), 1e-3, np.float32)
        np.testing.assert_allclose(rms_norm(x, eps=1e-6), _np_rms_norm(x, eps=1e-6), rtol=1e-5)
        np.testing.assert_allclose(layer_norm(x, eps=0.5), _np_layer_norm(x, eps=0.5), atol=1e-6)

    @parameterized.parameters("layernorm", "rmsnorm")
    def test_bfloat16_computed_in_float32(self, name):
        xb = jnp.asarray(self.x * 100, jnp.bfloat16)
        out = NORMS.get(name).fn(xb)
        chex.assert_type(out, jnp.bfloat16)
        ref = (_np_layer_norm if name == "layernorm" else _np_rms_norm)(np.asarray(xb, np.float32))
        np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=1e-2)

    @parameterized.parameters(*NORMS.names())
    def test_bfloat16_arithmetic_is_float32_in_the_jaxpr(self, name):
        """Outputs of size ~1 rounded to bfloat16 cannot tell bf16 arithmetic from f32, the program
        can: every operation but the casts in and out runs on float32, the reductions included."""
        spec = NORMS.get(name)
        args = [jnp.asarray(self.x, jnp.bfloat16), jnp.asarray(self.scale, jnp.bfloat16)]
        if spec.has_bias:
            args.append(jnp.asarray(self.bias, jnp.bfloat16))
        eqns = _eqns(jax.make_jaxpr(spec.fn)(*args).jaxpr)
        assert any(e.primitive.name == "reduce_sum" for e in eqns)
        for e in eqns:
            if e.primitive.name == "convert_element_type":
                continue
            dtypes = {v.aval.dtype for v in (*e.invars, *e.outvars) if jnp.issubdtype(v.aval.dtype, jnp.floating)}
            assert dtypes <= {jnp.dtype(jnp.float32)}, f"{name}: {e.primitive.name} on {sorted(map(str, dtypes))}"

    def test_registry(self):
        assert NORMS.get("layernorm").has_bias and not NORMS.get("rmsnorm").has_bias
        assert NORMS.get("rmsnorm").fn is rms_norm
        with pytest.raises(KeyError, match="did you mean 'rmsnorm'"):
            NORMS.get("rmsnrom")


class PlacementTest(chex.TestCase):
    x = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], np.float32)
    w = np.array([[0.5, -1.0, 0.0], [1.0, 0.2, -0.3], [0.0, 0.7, 2.0]], np.float32)

    def _f(self, h):
        return h @ self.w

    def _run(self, name, alpha=1.0):
        p = PLACEMENTS.get(name)
        fn = functools.partial(p.apply, sublayer_fn=self._f, norm_fn=layer_norm, alpha=alpha)
        return np.asarray(self.variant(fn)(self.x), np.float64)

    @chex.variants(with_jit=True, without_jit=True)
    def test_post(self):
        x, w = self.x.astype(np.float64), self.w.astype(np.float64)
        np.testing.assert_allclose(self._run("post"), _np_layer_norm(x + x @ w), atol=1e-5)
        assert not PLACEMENTS.get("post").final_norm

    @chex.variants(with_jit=True, without_jit=True)
    def test_pre(self):
        x, w = self.x.astype(np.float64), self.w.astype(np.float64)
        np.testing.assert_allclose(self._run("pre"), x + _np_layer_norm(x) @ w, atol=1e-5)
        assert PLACEMENTS.get("pre").final_norm

    @chex.variants(with_jit=True, without_jit=True)
    def test_deepnorm(self):
        x, w = self.x.astype(np.float64), self.w.astype(np.float64)
        alpha = 2.5
        np.testing.assert_allclose(self._run("deepnorm", alpha), _np_layer_norm(alpha * x + x @ w), atol=1e-5)
        assert not np.allclose(self._run("deepnorm", alpha), self._run("post"), atol=1e-3)
        assert not PLACEMENTS.get("deepnorm").final_norm

    def test_registry(self):
        assert set(PLACEMENTS.names()) >= {"post", "pre", "deepnorm"}
        for name in PLACEMENTS:
            assert PLACEMENTS.get(name).name == name


def _dn(architecture, n, m, side):
    return deepnorm_constants(architecture=architecture, n_encoder_layers=n, n_decoder_layers=m, side=side)


class DeepNormConstantsTest(parameterized.TestCase):
    @parameterized.parameters(6, 18, 48, 100)
    def test_decoder_only(self, m):
        alpha, beta = _dn("decoder_only", 0, m, "decoder")
        assert alpha == pytest.approx((2 * m) ** (1 / 4), rel=1e-12)
        assert beta == pytest.approx(1 / (8 * m) ** (1 / 4), rel=1e-12)

    @parameterized.parameters(6, 18, 48, 100)
    def test_encoder_only(self, n):
        alpha, beta = _dn("encoder_only", n, 0, "encoder")
        assert alpha == pytest.approx((2 * n) ** (1 / 4), rel=1e-12)
        assert beta == pytest.approx(1 / (8 * n) ** (1 / 4), rel=1e-12)

    def test_hand_values(self):
        # decoder-only M=6: 12^(1/4) and 48^(-1/4); M=100: 200^(1/4), 800^(-1/4)
        assert _dn("decoder_only", 0, 6, "decoder") == pytest.approx((1.861210, 0.379918), abs=1e-6)
        assert _dn("decoder_only", 0, 100, "decoder") == pytest.approx((3.760603, 0.188030), abs=1e-6)
        # encoder-decoder N=M=6: N^4 M = 7776 = 6^5; 6^(5/16) = 1.750541...
        assert _dn("encoder_decoder", 6, 6, "encoder") == pytest.approx((1.417938, 0.496989), abs=1e-6)
        assert _dn("encoder_decoder", 6, 6, "decoder") == pytest.approx((2.059767, 0.343295), abs=1e-6)

    @parameterized.parameters((6, 6), (18, 18), (12, 6))
    def test_encoder_decoder(self, n, m):
        a_enc, b_enc = _dn("encoder_decoder", n, m, "encoder")
        a_dec, b_dec = _dn("encoder_decoder", n, m, "decoder")
        assert a_enc == pytest.approx(0.81 * (n**4 * m) ** (1 / 16), rel=1e-12)
        assert b_enc == pytest.approx(0.87 * (n**4 * m) ** (-1 / 16), rel=1e-12)
        assert a_dec == pytest.approx((3 * m) ** (1 / 4), rel=1e-12)
        assert b_dec == pytest.approx((12 * m) ** (-1 / 4), rel=1e-12)

    def test_placement_constants(self):
        kw = dict(architecture="encoder_decoder", n_encoder_layers=18, n_decoder_layers=18)
        assert placement_constants("post", side="encoder", **kw) == (1.0, 1.0)
        assert placement_constants("pre", side="decoder", **kw) == (1.0, 1.0)
        assert placement_constants("deepnorm", side="decoder", **kw) == _dn("encoder_decoder", 18, 18, "decoder")
        with pytest.raises(KeyError, match="did you mean 'post'"):
            placement_constants("psot", side="encoder", **kw)

    def test_errors(self):
        with pytest.raises(ValueError, match="architecture='gpt'"):
            _dn("gpt", 6, 6, "decoder")
        with pytest.raises(ValueError, match="side='encoder'"):
            _dn("decoder_only", 0, 6, "encoder")
        with pytest.raises(ValueError, match="side='middle'"):
            _dn("encoder_decoder", 6, 6, "middle")
        with pytest.raises(ValueError, match="n_encoder_layers=0"):
            _dn("encoder_decoder", 0, 6, "encoder")
        with pytest.raises(ValueError, match="n_decoder_layers=0"):
            _dn("decoder_only", 6, 0, "decoder")
