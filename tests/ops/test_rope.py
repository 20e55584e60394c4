"""RoPE against float64 numpy references, its invariants, and the context-extension scalings."""

import dataclasses
import functools
import math

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.rope import ROPE_SCALINGS, RopeScaling, apply_rope, rope_frequencies, softmax_mscale

B, T, H, D = 2, 5, 3, 8


def _np_inv_freq(d, theta):
    return np.array([theta ** (-2.0 * i / d) for i in range(d // 2)])


def _np_rope(x, pos, theta=10000.0, pairing="split", inv_freq=None, factor=1.0):
    """Naive float64 loop: rotate each pair (a, b) by pos * inv_freq[i]."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    inv_freq = _np_inv_freq(d, theta) if inv_freq is None else inv_freq
    out = np.empty_like(x)
    for b, t, h in np.ndindex(*x.shape[:3]):
        for i in range(d // 2):
            ia, ib = (i, i + d // 2) if pairing == "split" else (2 * i, 2 * i + 1)
            ang = pos[b, t] * inv_freq[i]
            a, c = x[b, t, h, ia], x[b, t, h, ib]
            out[b, t, h, ia] = factor * (a * math.cos(ang) - c * math.sin(ang))
            out[b, t, h, ib] = factor * (c * math.cos(ang) + a * math.sin(ang))
    return out


def _data(seed=0, shape=(B, T, H, D)):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    pos = rng.integers(0, 50, size=shape[:2])
    return x, pos


class RopeTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("split", "adjacent")
    def test_matches_naive_loop(self, pairing):
        x, pos = _data()
        out = self.variant(functools.partial(apply_rope, pairing=pairing))(x, pos)
        chex.assert_shape(out, (B, T, H, D))
        chex.assert_type(out, jnp.float32)
        np.testing.assert_allclose(out, _np_rope(x, pos, pairing=pairing), atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_norm_preserved(self):
        x, pos = _data(1)
        pos = pos * 1000
        out = self.variant(apply_rope)(x, pos)
        np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("split", "adjacent")
    def test_dot_product_depends_only_on_offset(self, pairing):
        rng = np.random.default_rng(2)
        q, k = rng.standard_normal((2, D)).astype(np.float32)
        m = np.array([[0, 3, 10, 57, 1000, 7]])
        n = np.array([[0, 3, 10, 57, 1000, 2]]) - 4  # m - n = 4 except the last (5)
        rope = self.variant(functools.partial(apply_rope, pairing=pairing))
        qs = rope(np.broadcast_to(q, (1, 6, 1, D)), m)[0, :, 0]
        ks = rope(np.broadcast_to(k, (1, 6, 1, D)), n)[0, :, 0]
        dots = np.sum(np.asarray(qs, np.float64) * np.asarray(ks, np.float64), axis=-1)
        np.testing.assert_allclose(dots[:5], dots[0], atol=1e-4)
        assert abs(dots[5] - dots[0]) > 1e-3  # a different offset gives a different score

    @chex.variants(with_jit=True, without_jit=True)
    def test_pairings_agree_up_to_permutation(self):
        x, pos = _data(3)
        # adjacent layout (x0, x1, x2, x3, ...) -> split layout (x0, x2, ..., x1, x3, ...)
        perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
        inv = np.argsort(perm)
        adjacent = self.variant(functools.partial(apply_rope, pairing="adjacent"))(x, pos)
        split = self.variant(functools.partial(apply_rope, pairing="split"))(x[..., perm], pos)
        np.testing.assert_allclose(adjacent, np.asarray(split)[..., inv], atol=1e-5)
        assert not np.allclose(adjacent, apply_rope(x, pos, pairing="split"), atol=1e-3)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("split", "adjacent")
    def test_offset_equals_row_of_full_sequence(self, pairing):
        x, _ = _data(4, shape=(2, 9, H, D))
        start = np.array([[0], [100]])  # a different decode offset per batch row
        full = self.variant(functools.partial(apply_rope, pairing=pairing))(x, start + np.arange(9))
        for p in (0, 4, 8):
            one = apply_rope(x[:, p : p + 1], start + p, pairing=pairing)
            chex.assert_shape(one, (2, 1, H, D))
            np.testing.assert_allclose(one, full[:, p : p + 1], atol=1e-5)

    def test_positions_vector_broadcasts_over_batch(self):
        x, _ = _data(5)
        pos_t = np.arange(T) + 3
        np.testing.assert_allclose(apply_rope(x, pos_t), apply_rope(x, np.broadcast_to(pos_t, (B, T))), atol=0)

    def test_bfloat16_in_bfloat16_out_computed_in_float32(self):
        x, pos = _data(6)
        xb = jnp.asarray(x, jnp.bfloat16)
        out = apply_rope(xb, pos + 5000)
        chex.assert_type(out, jnp.bfloat16)
        ref = _np_rope(np.asarray(xb, np.float32), pos + 5000)
        np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=3e-2)


class ScalingTest(chex.TestCase):
    def test_none_equals_plain(self):
        x, pos = _data(7)
        np.testing.assert_array_equal(apply_rope(x, pos, scaling=RopeScaling("none", 1.0)), apply_rope(x, pos))

    @chex.variants(with_jit=True, without_jit=True)
    def test_linear_is_position_interpolation(self):
        x, pos = _data(8)
        s = RopeScaling("linear", factor=4.0)
        out = self.variant(functools.partial(apply_rope, scaling=s))(x, pos)
        np.testing.assert_allclose(out, _np_rope(x, pos / 4.0), atol=1e-5)
        np.testing.assert_allclose(out, apply_rope(x, pos.astype(np.float32) / 4.0), atol=1e-5)

    def test_ntk_base_formula(self):
        d, theta, s = 16, 10000.0, 8.0
        inv_freq, factor = rope_frequencies(d, theta=theta, scaling=RopeScaling("ntk", s))
        new_theta = theta * s ** (d / (d - 2))
        np.testing.assert_allclose(inv_freq, _np_inv_freq(d, new_theta), rtol=1e-6)
        assert factor == 1.0
        x, pos = _data(9)
        np.testing.assert_allclose(
            apply_rope(x, pos, scaling=RopeScaling("ntk", 3.0)),
            _np_rope(x, pos, theta=10000.0 * 3.0 ** (D / (D - 2))),
            atol=1e-5,
        )

    @staticmethod
    def _np_yarn(d, theta, s, max_len, beta_fast, beta_slow):
        """YaRN (Peng et al. 2023, sec. 3.2), written out in numpy.

        Wavelength of frequency index i: lambda_i = 2 pi theta^(2i/d); it turns r_i = L / lambda_i
        times over the original length L. Solving r = beta for i gives the boundary index
        i(beta) = d * ln(L / (2 pi beta)) / (2 ln theta). Indices below floor(i(beta_fast)) keep
        theta^(-2i/d); indices above ceil(i(beta_slow)) are divided by s; a linear ramp in i
        blends in between (the reference code, as in Hugging Face). Attention scale
        sqrt(1/t) = 0.1 ln(s) + 1.
        """
        i = np.arange(d // 2, dtype=np.float64)
        base = theta ** (-2 * i / d)
        i_fast = d * np.log(max_len / (2 * np.pi * beta_fast)) / (2 * np.log(theta))
        i_slow = d * np.log(max_len / (2 * np.pi * beta_slow)) / (2 * np.log(theta))
        lo, hi = max(np.floor(i_fast), 0), min(np.ceil(i_slow), d - 1)
        gamma = np.clip((i - lo) / (hi - lo), 0, 1)  # 0: extrapolate, 1: interpolate
        return (1 - gamma) * base + gamma * base / s, 0.1 * np.log(s) + 1

    @parameterized.parameters(
        (64, 10000.0, 4.0, 2048, 32.0, 1.0),
        (128, 500000.0, 8.0, 8192, 32.0, 1.0),
        (32, 10000.0, 16.0, 4096, 16.0, 2.0),
    )
    def test_yarn_matches_numpy_derivation(self, d, theta, s, max_len, bf, bs):
        scaling = RopeScaling("yarn", s, max_len, bf, bs)
        inv_freq, factor = rope_frequencies(d, theta=theta, scaling=scaling)
        ref_freq, ref_factor = self._np_yarn(d, theta, s, max_len, bf, bs)
        chex.assert_shape(inv_freq, (d // 2,))
        np.testing.assert_allclose(inv_freq, ref_freq, rtol=1e-6)
        assert factor == pytest.approx(ref_factor, rel=1e-12)
        # the paper's boundary behaviour: fast dims untouched, slow dims fully interpolated
        base = _np_inv_freq(d, theta)
        turns = max_len * base / (2 * np.pi)
        # r_{i+1} > beta_fast (resp. r_{i-1} < beta_slow) puts i clear of the truncated ramp
        fast, slow = turns > bf * theta ** (2 / d), turns < bs * theta ** (-2 / d)
        assert fast.any() and slow.any()
        np.testing.assert_allclose(np.asarray(inv_freq)[fast], base[fast], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(inv_freq)[slow], base[slow] / s, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_yarn_apply_scales_cos_and_sin(self):
        x, pos = _data(10)
        scaling = RopeScaling("yarn", factor=4.0, original_max_len=64)
        inv_freq, factor = rope_frequencies(D, scaling=scaling)
        out = self.variant(functools.partial(apply_rope, scaling=scaling))(x, pos)
        ref = _np_rope(x, pos, inv_freq=np.asarray(inv_freq, np.float64), factor=factor)
        np.testing.assert_allclose(out, ref, atol=1e-5)
        assert factor == pytest.approx(0.1 * math.log(4.0) + 1)

    def test_yarn_untruncated_ramp_and_deepseek_magnitudes(self):
        """truncate=False keeps the ramp's bounds i(beta) unrounded; DeepSeek's cos/sin factor is
        m(mscale) / m(mscale_all_dim) and its softmax factor m(mscale_all_dim)^2, m(x) = 0.1 x ln s + 1;
        an explicit attention_factor wins."""
        d, theta, s, L = 64, 10000.0, 40.0, 4096
        i = np.arange(d // 2, dtype=np.float64)
        base = theta ** (-2 * i / d)
        lo, hi = (d * np.log(L / (2 * np.pi * b)) / (2 * np.log(theta)) for b in (32.0, 1.0))
        gamma = np.clip((i - lo) / (hi - lo), 0, 1)
        scaling = RopeScaling("yarn", s, L, truncate=False, mscale=0.707, mscale_all_dim=1.0)
        inv_freq, factor = rope_frequencies(d, theta=theta, scaling=scaling)
        np.testing.assert_allclose(inv_freq, (1 - gamma) * base + gamma * base / s, rtol=1e-6)
        m = lambda x: 0.1 * x * np.log(s) + 1
        assert factor == pytest.approx(m(0.707) / m(1.0), rel=1e-12)
        assert softmax_mscale(scaling) == pytest.approx(m(1.0) ** 2, rel=1e-12)
        truncated, _ = rope_frequencies(d, theta=theta, scaling=dataclasses.replace(scaling, truncate=True))
        assert not np.allclose(truncated, inv_freq)
        explicit = dataclasses.replace(scaling, attention_factor=0.5)
        assert rope_frequencies(d, theta=theta, scaling=explicit)[1] == 0.5
        only_one = dataclasses.replace(scaling, mscale_all_dim=None)
        assert rope_frequencies(d, theta=theta, scaling=only_one)[1] == pytest.approx(m(1.0), rel=1e-12)
        assert softmax_mscale(only_one) == softmax_mscale(None) == softmax_mscale(RopeScaling("linear", s)) == 1.0

    def test_registry_and_hashable(self):
        assert set(ROPE_SCALINGS.names()) == {"none", "linear", "ntk", "yarn", "llama3"}
        a, b = RopeScaling("yarn", 2.0), RopeScaling("yarn", 2.0)
        assert hash(a) == hash(b) and a == b
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.factor = 3.0


def test_errors():
    x = np.zeros((1, 2, 1, 7), np.float32)
    with pytest.raises(ValueError, match="head_dim=7"):
        apply_rope(x, np.zeros((1, 2), np.int32))
    with pytest.raises(ValueError, match="rope pairing 'interleaved'"):
        apply_rope(np.zeros((1, 2, 1, 8)), np.zeros((1, 2)), pairing="interleaved")
    with pytest.raises(ValueError, match="factor=0.5"):
        RopeScaling("linear", 0.5)
    with pytest.raises(ValueError, match="did you mean 'yarn'"):
        RopeScaling("yaarn", 2.0)
    with pytest.raises(ValueError, match="no effect"):
        RopeScaling("none", 2.0)
    with pytest.raises(ValueError, match="head_dim=5"):
        rope_frequencies(5)
