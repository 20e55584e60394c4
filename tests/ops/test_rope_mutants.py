"""RoPE at its edges: a non-default theta reaching the rotation, the boundaries of the RopeScaling
and rope_frequencies checks with their exact messages, and float32 computation whatever the
input dtype (float64 under jax_enable_x64 included)."""

import functools
import math

import jax
import numpy as np
import pytest

from transformer_jax.ops.rope import RopeScaling, apply_rope, rope_frequencies


def _np_rope_split(x, pos, theta, angle_dtype: type[np.floating] = np.float64):
    """Naive loop over pairs (x[i], x[i + D/2]) rotated by pos * theta^(-2i/D), angle in angle_dtype."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    out = np.empty_like(x)
    for b, t, h in np.ndindex(*x.shape[:3]):
        for i in range(d // 2):
            inv = angle_dtype(theta ** (-2.0 * i / d))
            ang = float(angle_dtype(angle_dtype(pos[b, t]) * inv))
            a, c = x[b, t, h, i], x[b, t, h, i + d // 2]
            out[b, t, h, i] = a * math.cos(ang) - c * math.sin(ang)
            out[b, t, h, i + d // 2] = c * math.cos(ang) + a * math.sin(ang)
    return out


def test_theta_reaches_the_rotation():
    """apply_rope(theta=...) rotates by theta's frequencies, not the default 10000's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    pos = np.array([[0, 1, 5, 40]])
    out = jax.jit(functools.partial(apply_rope, theta=500.0))(x, pos)
    np.testing.assert_allclose(out, _np_rope_split(x, pos, 500.0), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(kind="rotary"), "unknown rope scaling kind 'rotary'; choose one of: none, linear, ntk, yarn, llama3"),
        (
            dict(kind="none", factor=2.0),
            "factor=2.0 has no effect with kind='none'; choose kind='linear', 'ntk' or 'yarn', or set factor=1",
        ),
        (dict(kind="yarn", factor=2.0, original_max_len=0), "original_max_len=0 must be >= 1"),
        (
            dict(kind="yarn", factor=2.0, beta_fast=4.0, beta_slow=4.0),
            "beta_fast=4.0 and beta_slow=4.0 must satisfy beta_fast > beta_slow > 0 (YaRN defaults: 32 and 1)",
        ),
        (
            dict(kind="yarn", factor=2.0, beta_fast=4.0, beta_slow=0.0),
            "beta_fast=4.0 and beta_slow=0.0 must satisfy beta_fast > beta_slow > 0 (YaRN defaults: 32 and 1)",
        ),
        (
            dict(kind="linear", factor=2.0, mscale_all_dim=1.0, truncate=False),
            "mscale_all_dim, truncate: not read by the 'linear' scaling (it reads factor); keep the default",
        ),
        (
            dict(kind="ntk", factor=2.0, original_max_len=64),
            "original_max_len: not read by the 'ntk' scaling (it reads factor); keep the default",
        ),
        (
            dict(kind="yarn", factor=2.0, low_freq_factor=2.0),
            "low_freq_factor: not read by the 'yarn' scaling (it reads factor, original_max_len, beta_fast, "
            "beta_slow, mscale, mscale_all_dim, attention_factor, truncate); keep the default",
        ),
        (dict(kind="yarn", factor=2.0, attention_factor=0.0), "attention_factor=0.0 must be > 0 (or None: not set)"),
    ],
)
def test_rope_scaling_errors(kwargs, message):
    """Unknown kinds, a factor without a kind, original_max_len < 1, beta_fast <= beta_slow or
    beta_slow <= 0 (equal values included), a field the kind does not read and a non-positive
    magnitude are refused with these messages."""
    with pytest.raises(ValueError) as err:
        RopeScaling(**kwargs)
    assert str(err.value) == message


def test_rope_scaling_boundaries_are_valid():
    """original_max_len=1 and beta values just inside the strict inequalities are accepted."""
    RopeScaling("yarn", 2.0, original_max_len=1)
    RopeScaling("yarn", 2.0, beta_fast=1.5, beta_slow=1.0)


@pytest.mark.parametrize(
    "head_dim,theta,message",
    [
        (0, 10000.0, "head_dim=0 must be a positive even number for RoPE"),
        (8, 1.0, "theta=1.0 must be > 1 (10000 is the usual base)"),
    ],
)
def test_rope_frequencies_errors(head_dim, theta, message):
    """head_dim 0 and theta 1 (the boundaries) are refused with these messages."""
    with pytest.raises(ValueError) as err:
        rope_frequencies(head_dim, theta=theta)
    assert str(err.value) == message


def test_small_theta_above_one_is_valid():
    """Any base above 1 works: theta=1.5 gives 1.5^(-2i/D)."""
    inv_freq, factor = rope_frequencies(8, theta=1.5)
    np.testing.assert_allclose(inv_freq, [1.5 ** (-2 * i / 8) for i in range(4)], rtol=1e-6)
    assert factor == 1.0


def test_float64_under_x64_is_computed_in_float32():
    """With x64 on, float64 x and positions come back float64 but computed in float32: every value is
    a float32 number, the angles are float32 products (visible at position 10000003), and the
    frequencies are float32."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 1, 4))  # float64
    pos = np.array([[3.0, 1000.0, 10000003.0]])
    with jax.enable_x64(True):
        inv_freq, out = jax.jit(lambda x, p: (rope_frequencies(4)[0], apply_rope(x, p)))(x, pos)
    assert inv_freq.dtype == np.float32 and out.dtype == np.float64
    np.testing.assert_array_equal(out, np.asarray(out, np.float32).astype(np.float64))
    ref32, ref64 = _np_rope_split(x, pos, 10000.0, np.float32), _np_rope_split(x, pos, 10000.0)
    assert np.abs(ref32 - ref64).max() > 1e-4
    np.testing.assert_allclose(out, ref32, atol=1e-5)
