"""Position encodings at their edges: T5 bucket defaults and the smallest valid bucket counts, one
ALiBi head, the causal default, exact error messages, and float32 / int32 results whatever the
input dtype (float positions, and float64 under jax_enable_x64)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.positions import (
    alibi_bias,
    alibi_slopes,
    relative_position_bias,
    relative_position_buckets,
    sinusoidal_embedding,
)


def _t5_buckets(rel, bidirectional, num_buckets, max_distance, dtype: type[np.floating] = np.float64):
    """T5's bucket of each offset kv - q, a Python loop; the log ratio is computed in `dtype`."""
    out = []
    for r in np.asarray(rel).ravel():
        nb, n, ret = num_buckets, -int(r), 0
        if bidirectional:
            nb //= 2
            ret = nb if n < 0 else 0
            n = abs(n)
        else:
            n = max(n, 0)
        exact = nb // 2
        if n < exact:
            out.append(ret + n)
            continue
        ratio = dtype(np.log(dtype(n) / dtype(exact)) / dtype(math.log(max_distance / exact)))
        out.append(ret + min(exact + int(dtype(ratio * dtype(nb - exact))), nb - 1))
    return np.array(out).reshape(np.shape(rel))


REL = np.arange(-300, 301)
# jitted: one compilation per configuration instead of one per eager op
_buckets = jax.jit(relative_position_buckets, static_argnames=("bidirectional", "num_buckets", "max_distance"))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_defaults_are_32_buckets_up_to_distance_128(bidirectional):
    """Without num_buckets / max_distance the buckets are T5's: 32 buckets, log-spaced up to 128."""
    got = _buckets(REL, bidirectional=bidirectional)
    np.testing.assert_array_equal(got, _t5_buckets(REL, bidirectional, 32, 128))


@pytest.mark.parametrize("bidirectional,num_buckets", [(False, 2), (True, 4)])
def test_smallest_bucket_counts_are_valid(bidirectional, num_buckets):
    """2 buckets (one direction) and 4 (both directions) are the documented minimum, and they work."""
    got = _buckets(REL, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=8)
    np.testing.assert_array_equal(got, _t5_buckets(REL, bidirectional, num_buckets, 8))


@pytest.mark.parametrize(
    "bidirectional,num_buckets,max_distance,message",
    [
        (False, 1, 128, "num_buckets=1 is too small; use at least 4 (bidirectional) or 2"),
        (True, 3, 128, "num_buckets=3 is too small; use at least 4 (bidirectional) or 2"),
        (True, 16, 4, "max_distance=4 must exceed the exact range 4 (num_buckets=16)"),
        (False, 8, 4, "max_distance=4 must exceed the exact range 4 (num_buckets=8)"),
    ],
)
def test_bucket_errors(bidirectional, num_buckets, max_distance, message):
    """Too few buckets, or a max_distance inside the exact range (equal included), are refused."""
    with pytest.raises(ValueError) as err:
        _buckets(REL, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert str(err.value) == message


def test_float_offsets_give_int32_buckets():
    """Offsets given as floats are taken as integers; the buckets are int32 either way."""
    rel = np.array([-200.0, -9.0, -3.0, 0.0, 3.0, 9.0, 200.0])
    got = _buckets(rel, bidirectional=True)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _t5_buckets(rel.astype(int), True, 32, 128))


def test_relative_bias_table_error_message():
    """A table whose row count is not num_buckets is refused, the message giving both numbers."""
    with pytest.raises(ValueError) as err:
        relative_position_bias(
            jnp.zeros((16, 2)),
            jnp.zeros((1, 2)),
            jnp.zeros((1, 2)),
            bidirectional=True,
            num_buckets=32,
            max_distance=128,
        )
    assert str(err.value) == "table_NH has 16 rows but num_buckets=32; the table must be [num_buckets, n_heads]"


def test_one_alibi_head():
    """A single head gets the power-of-two rule's only slope, 2^-8."""
    np.testing.assert_allclose(alibi_slopes(1), [2.0**-8], rtol=1e-7)


def test_alibi_bias_is_causal_by_default():
    """Without `causal`, the bias is the causal form -slope * (q_pos - kv_pos), signed."""
    slopes = np.array([0.5, 0.25], np.float32)
    q, kv = np.array([[4, 1]]), np.array([[0, 2, 5]])
    ref = -slopes[:, None, None] * (q[0][:, None] - kv[0][None, :])
    np.testing.assert_allclose(jax.jit(alibi_bias)(slopes, q, kv)[0], ref, atol=1e-6)


def test_sinusoidal_width_must_be_positive_and_even():
    """d_model=0 is refused like an odd width, with the reason at the end of the message."""
    for d_model in (0, 3):
        with pytest.raises(ValueError) as err:
            sinusoidal_embedding(np.arange(3), d_model)
        assert str(err.value).startswith(f"d_model={d_model} must be")
        assert str(err.value).endswith("(sin and cos channels come in pairs)")


def test_float64_inputs_under_x64_give_float32_results():
    """With x64 on, float64 positions and slopes still give float32 encodings and biases, and the
    bucket logarithms are taken in float32 like T5's (at 9 buckets / distance 128 that moves offsets
    -8, -16 and -64 down a bucket compared with float64)."""
    rel = np.arange(-80, 1)
    ref32, ref64 = (_t5_buckets(rel, False, 9, 128, dtype) for dtype in (np.float32, np.float64))
    assert (ref32 != ref64).any()
    positions = np.array([[0.0, 1.5, 7.0]])

    @jax.jit
    def encodings(positions, rel):
        slopes = alibi_slopes(2)
        return (
            sinusoidal_embedding(positions, 4, max_timescale=100.0),
            slopes,
            alibi_bias(slopes.astype(np.float64), positions, positions),
            relative_position_buckets(rel, bidirectional=False, num_buckets=9, max_distance=128),
        )

    with jax.enable_x64(True):
        pe, slopes, bias, buckets = encodings(positions, rel)
    assert (pe.dtype, slopes.dtype, bias.dtype, buckets.dtype) == (np.float32, np.float32, np.float32, np.int32)
    p = positions[0]
    ref_pe = np.stack([np.sin(p), np.cos(p), np.sin(p / 10), np.cos(p / 10)], -1)
    np.testing.assert_allclose(pe[0], ref_pe, atol=1e-6)
    np.testing.assert_allclose(slopes, [2.0**-4, 2.0**-8], rtol=1e-7)
    np.testing.assert_allclose(bias[0], -np.array([2.0**-4, 2.0**-8])[:, None, None] * (p[:, None] - p), atol=1e-6)
    np.testing.assert_array_equal(buckets, ref32)
