"""The variants the Gemma / Llama 3 / speedrun recipes add, against formulas written here:
Llama 3 RoPE scaling (Hugging Face's three-branch rule, coded as a loop), Gemma's (1 + w) RMSNorm,
GeGLU with tanh GELU, squared ReLU, the sandwich placement."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import activations, norms, residual
from transformer_jax.ops.rope import RopeScaling, rope_frequencies


def _llama3_loop(head_dim, theta, factor, low, high, old_len):
    out = []
    for i in range(0, head_dim, 2):
        f = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / f
        if wavelen < old_len / high:
            out.append(f)
        elif wavelen > old_len / low:
            out.append(f / factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


@pytest.mark.parametrize("theta,old_len", [(500000.0, 8192), (10000.0, 64)])
def test_llama3_scaling_matches_the_three_branch_rule(theta, old_len):
    scaling = RopeScaling(
        kind="llama3", factor=8.0, original_max_len=old_len, low_freq_factor=1.0, high_freq_factor=4.0
    )
    inv_freq, attn_factor = rope_frequencies(128, theta=theta, scaling=scaling)
    want = _llama3_loop(128, theta, 8.0, 1.0, 4.0, old_len)
    np.testing.assert_allclose(np.asarray(inv_freq), want, rtol=1e-6)
    assert attn_factor == 1.0
    # all three branches occur: kept, divided by 8, and smoothed in between
    base = _llama3_loop(128, theta, 1.0, 1.0, 4.0, old_len)
    ratio = want / base
    assert np.any(np.isclose(ratio, 1.0)) and np.any(np.isclose(ratio, 1 / 8))
    assert np.any((ratio > 1 / 8 + 1e-6) & (ratio < 1 - 1e-6))


def test_llama3_scaling_rejects_inverted_factors():
    with pytest.raises(ValueError, match="high_freq_factor=1.0 and low_freq_factor=2.0"):
        RopeScaling(kind="llama3", factor=8.0, low_freq_factor=2.0, high_freq_factor=1.0)


def test_rmsnorm_plus_one_is_gemmas_formula():
    r = np.random.default_rng(0)
    x, w = r.normal(size=(3, 16)), r.normal(size=16) * 0.1
    want = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-6) * (1 + w)
    got = norms.NORMS.get("rmsnorm_plus_one").fn(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32), eps=1e-6)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    assert norms.NORMS.get("rmsnorm_plus_one").scale_init == 0.0


def test_geglu_tanh_and_relu2_ffns():
    r = np.random.default_rng(1)
    x, w_in, w_gate, w_out = r.normal(size=(4, 6)), r.normal(size=(6, 5)), r.normal(size=(6, 5)), r.normal(size=(5, 6))
    gelu_tanh = lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    f = lambda a: jnp.asarray(a, jnp.float32)
    got = activations.ffn(f(x), f(w_in), f(w_out), activation="geglu_tanh", w_gate=f(w_gate))
    np.testing.assert_allclose(np.asarray(got), (gelu_tanh(x @ w_gate) * (x @ w_in)) @ w_out, rtol=1e-4, atol=1e-4)
    got = activations.ffn(f(x), f(w_in), f(w_out), activation="relu2")
    np.testing.assert_allclose(np.asarray(got), (np.maximum(x @ w_in, 0) ** 2) @ w_out, rtol=1e-4, atol=1e-4)


def test_sandwich_placement_is_pre_ln_with_a_final_norm_and_a_sublayer_norm():
    spec = residual.PLACEMENTS.get("sandwich")
    assert spec.final_norm and spec.sublayer_norm
    x = jnp.arange(6.0).reshape(2, 3)
    out = spec.apply(x, lambda h: 10 * h, lambda h: h + 1, 1.0)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x + 10 * (x + 1)))
