"""Logit soft-capping in every attention path, against a numpy formula written here:
softmax(c tanh(q k^T s / c) + bias, masked) v; chunked's hand-written backward against autodiff of
the xla path; the kernels that cannot cap refuse it by name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.attention import attention, resolve_impl
from transformer_jax.ops.decode_attention import decode_attention, pallas_decode_problems
from transformer_jax.ops.kv_cache import init_kv_cache, update_kv_cache
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.softcap import softcap

CAP = 1.5


def _np_attention(q, k, v, scale, cap, visible, bias=None):
    """float64 loop over batch and heads; query head h reads kv head h // G."""
    B, T, H, D = q.shape
    K = k.shape[2]
    out = np.zeros((B, T, H, D))
    for b in range(B):
        for h in range(H):
            s = q[b, :, h] @ k[b, :, h // (H // K)].T * scale
            s = cap * np.tanh(s / cap)
            if bias is not None:
                s = s + bias[b, h]
            s = np.where(visible, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, :, h] = (p / p.sum(-1, keepdims=True)) @ v[b, :, h // (H // K)]
    return out


def _qkv(T=7, S=7, H=4, K=2, D=8, seed=0):
    r = np.random.default_rng(seed)
    # Logits of std ~3 so that the cap (1.5) changes them a lot: an ignored cap cannot pass.
    q = r.normal(size=(2, T, H, D)) * 1.5
    k = r.normal(size=(2, S, K, D)) * 1.5
    v = r.normal(size=(2, S, K, D))
    return q, k, v


def test_softcap_formula_and_identity():
    x = jnp.array([-100.0, -1.0, 0.0, 0.5, 100.0])
    np.testing.assert_allclose(softcap(x, 2.0), 2.0 * np.tanh(np.asarray(x) / 2.0), rtol=1e-6)
    assert softcap(x, None) is x
    with pytest.raises(ValueError, match="softcap cap=0"):
        softcap(x, 0.0)


@pytest.mark.parametrize("impl", ["xla", "chunked"])
def test_attention_softcap_matches_numpy(impl):
    q, k, v = _qkv()
    bias = np.random.default_rng(1).normal(size=(2, 4, 7, 7))
    causal = np.tril(np.ones((7, 7), bool))
    want = _np_attention(q, k, v, 0.3, CAP, causal, bias)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    got = attention(
        f32(q), f32(k), f32(v), mask=AttentionMask(causal=True), bias=f32(bias), scale=0.3, impl=impl,
        block_size=3, softcap=CAP,
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)
    uncapped = attention(f32(q), f32(k), f32(v), mask=AttentionMask(causal=True), bias=f32(bias), scale=0.3, impl=impl)
    assert np.abs(np.asarray(uncapped) - want).max() > 1e-2  # the cap matters on these logits


def test_chunked_softcap_gradients_equal_autodiff_of_xla():
    q, k, v = (jnp.asarray(x, jnp.float32) for x in _qkv())
    bias = jnp.asarray(np.random.default_rng(2).normal(size=(1, 4, 7, 7)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(3).normal(size=(2, 7, 4, 8)), jnp.float32)

    def loss(impl):
        def f(q, k, v, bias):
            out = attention(q, k, v, mask=AttentionMask(causal=True), bias=bias, impl=impl, block_size=3, softcap=CAP)
            return jnp.sum(out * w)

        return jax.grad(f, argnums=(0, 1, 2, 3))(q, k, v, bias)

    for got, want in zip(loss("chunked"), loss("xla")):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)


@pytest.mark.parametrize("impl", ["dense", "blocked"])
def test_decode_softcap_matches_numpy(impl):
    q, k, v = _qkv(T=1, S=9)
    cache = init_kv_cache(2, 12, 2, 8)
    cache = update_kv_cache(cache, jnp.asarray(k, jnp.float32), jnp.asarray(v, jnp.float32))
    mask = AttentionMask(causal=True, q_positions=jnp.full((2, 1), 8, jnp.int32))
    got = decode_attention(jnp.asarray(q, jnp.float32), cache, mask=mask, impl=impl, block_size=4, softcap=CAP)
    want = _np_attention(q, k, v, 8**-0.5, CAP, np.ones((1, 9), bool))
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)


def test_kernels_without_a_cap_refuse_it():
    q, k, v = (jnp.asarray(x, jnp.float32) for x in _qkv())
    for impl in ("cudnn", "splash", "pallas_gpu"):
        with pytest.raises(ValueError, match="soft cap"):
            attention(q, k, v, impl=impl, softcap=CAP)
    with pytest.raises(ValueError, match="softcap"):
        attention(q, k, v, kind="linear", softcap=CAP)
    assert "a logit soft cap (1.5)" in pallas_decode_problems(None, False, 1, 16, softcap=CAP)
    for backend in ("cpu", "gpu", "tpu"):
        assert resolve_impl(backend, q.shape, k.shape, dtype=jnp.bfloat16, softcap=CAP) in ("xla", "chunked")
