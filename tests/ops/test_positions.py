"""Sinusoidal encoding, T5 relative buckets/bias and ALiBi against hand values and naive loops."""

import functools
import math

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.positions import (
    alibi_bias,
    alibi_slopes,
    relative_position_bias,
    relative_position_buckets,
    sinusoidal_embedding,
)


def _t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's ``_relative_position_bucket`` for one Python int, in float64."""
    ret = 0
    n = -rel
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


class SinusoidalTest(chex.TestCase):
    def test_hand_values(self):
        pe = np.asarray(sinusoidal_embedding(np.array([0, 1, 3]), 8))
        np.testing.assert_allclose(pe[0], [0, 1] * 4, atol=1e-7)
        assert pe[1, 0] == pytest.approx(math.sin(1.0), abs=1e-6)
        assert pe[1, 1] == pytest.approx(math.cos(1.0), abs=1e-6)
        assert pe[2, 3] == pytest.approx(math.cos(3 / 10000 ** (2 / 8)), abs=1e-6)
        assert pe[2, 6] == pytest.approx(math.sin(3 / 10000 ** (6 / 8)), abs=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_double_loop(self):
        d = 6
        pos = np.array([[0, 1, 2, 7], [11, 50, 99, 1000]])
        pe = self.variant(functools.partial(sinusoidal_embedding, d_model=d))(pos)
        chex.assert_shape(pe, (2, 4, d))
        chex.assert_type(pe, jnp.float32)
        ref = np.zeros((2, 4, d))
        for b, t in np.ndindex(2, 4):
            for i in range(d // 2):
                ref[b, t, 2 * i] = math.sin(pos[b, t] / 10000 ** (2 * i / d))
                ref[b, t, 2 * i + 1] = math.cos(pos[b, t] / 10000 ** (2 * i / d))
        np.testing.assert_allclose(pe, ref, atol=2e-4)  # float32 angle at pos=1000

    def test_float_positions_and_timescale(self):
        pe = sinusoidal_embedding(jnp.array([2.5]), 4, max_timescale=100.0)
        np.testing.assert_allclose(pe[0], [math.sin(2.5), math.cos(2.5), math.sin(0.25), math.cos(0.25)], atol=1e-6)

    def test_odd_d_model(self):
        with pytest.raises(ValueError, match="d_model=7"):
            sinusoidal_embedding(np.arange(3), 7)


class RelativeBiasTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 16, 64), (True, 64, 256))
    def test_buckets_match_t5(self, bidirectional, num_buckets, max_distance):
        rel = np.arange(-400, 401)
        fn = functools.partial(
            relative_position_buckets,
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )
        got = self.variant(fn)(rel)
        ref = [_t5_bucket(int(r), bidirectional, num_buckets, max_distance) for r in rel]
        np.testing.assert_array_equal(got, ref)
        assert int(jnp.min(got)) == 0 and int(jnp.max(got)) == num_buckets - 1

    @chex.variants(with_jit=True, without_jit=True)
    def test_bias_gathers_table(self):
        nb, h = 8, 3
        table = np.random.default_rng(0).standard_normal((nb, h)).astype(np.float32)
        q = np.array([[0, 1, 2], [10, 11, 12]])
        kv = np.array([[0, 1, 2, 3], [0, 5, 10, 30]])
        fn = functools.partial(relative_position_bias, bidirectional=True, num_buckets=nb, max_distance=20)
        bias = self.variant(fn)(table, q, kv)
        chex.assert_shape(bias, (2, h, 3, 4))
        bias = np.asarray(bias)
        for b, hh, t, s in np.ndindex(2, h, 3, 4):
            bucket = _t5_bucket(int(kv[b, s] - q[b, t]), True, nb, 20)
            assert bias[b, hh, t, s] == table[bucket, hh]

    def test_table_rows_must_match(self):
        with pytest.raises(ValueError, match="num_buckets=32"):
            relative_position_bias(
                np.zeros((16, 2)),
                np.zeros((1, 2)),
                np.zeros((1, 2)),
                bidirectional=True,
                num_buckets=32,
                max_distance=128,
            )


class AlibiTest(chex.TestCase):
    def test_slopes_power_of_two(self):
        np.testing.assert_allclose(alibi_slopes(8), [2.0**-k for k in range(1, 9)], rtol=1e-7)
        np.testing.assert_allclose(alibi_slopes(4), [2.0**-k for k in (2, 4, 6, 8)], rtol=1e-7)

    def test_slopes_non_power_of_two(self):
        # 6 heads: the 4-head slopes, then every other 8-head slope (2^-1, 2^-3)
        six = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
        np.testing.assert_allclose(alibi_slopes(6), six, rtol=1e-7)
        # 12 heads: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16-head set
        twelve = [2.0**-k for k in range(1, 9)] + [2.0**-k for k in (0.5, 1.5, 2.5, 3.5)]
        np.testing.assert_allclose(alibi_slopes(12), twelve, rtol=1e-7)
        with pytest.raises(ValueError, match="n_heads=0"):
            alibi_slopes(0)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(True, False)
    def test_bias_loop(self, causal):
        slopes = alibi_slopes(4)
        q = np.array([[3, 4], [0, 1]])
        kv = np.array([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
        bias = self.variant(functools.partial(alibi_bias, causal=causal))(slopes, q, kv)
        chex.assert_shape(bias, (2, 4, 2, 5))
        bias, slopes = np.asarray(bias), np.asarray(slopes)
        for b, h, t, s in np.ndindex(*bias.shape):
            d = q[b, t] - kv[b, s]
            ref = -float(slopes[h]) * (d if causal else abs(d))
            assert float(bias[b, h, t, s]) == pytest.approx(ref, abs=1e-6)
