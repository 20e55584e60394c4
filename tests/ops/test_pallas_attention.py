"""Pallas attention kernels (splash, pallas_gpu, flash-decoding) in interpret mode on CPU against
xla, `auto`'s resolution per backend and mask, and the errors for masks a kernel cannot take."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.core import unread
from transformer_jax.ops import attention as attention_mod
from transformer_jax.ops.attention import ATTENTION_IMPLS, attention, resolve_impl
from transformer_jax.ops.kv_cache import cached_attention, init_kv_cache, update_kv_cache
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.pallas_attention import pallas_gpu_attention, splash_attention
from transformer_jax.ops.pallas_decode import flash_decode_attention


def _qkvw(B, T, S, H, K, D, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, S, K, D)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((B, T, H, D)).astype(np.float32)
    return q, k, v, w


def _segments(B, T):
    seg = np.ones((B, T), np.int32)
    seg[0, T // 3 :] = 2
    seg[-1, T // 2 :] = 3
    return jnp.asarray(seg)


def _mask(kind: str, B: int, T: int) -> AttentionMask | None:
    if kind == "none":
        return None
    if kind == "causal":
        return AttentionMask(causal=True)
    if kind == "window":
        return AttentionMask(causal=True, window=T // 5)
    if kind == "two_sided_window":
        return AttentionMask(window=T // 5)
    seg = _segments(B, T)
    return AttentionMask(causal=kind == "causal_segments", q_segment_ids=seg, kv_segment_ids=seg)


def _check_against_xla(fn, q, k, v, w, mask, scale):
    def loss(impl_fn):
        def f(q, k, v):
            out = impl_fn(q, k, v)
            return jnp.sum(out * w), out

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True))

    (_, out), grads = loss(fn)(q, k, v)
    (_, ref), ref_grads = loss(lambda q, k, v: attention(q, k, v, mask=mask, scale=scale, impl="xla"))(q, k, v)
    chex.assert_shape(out, q.shape)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
        np.testing.assert_allclose(g, r, atol=2e-5, rtol=2e-5, err_msg=name)


@pytest.mark.parametrize("kind", ["none", "causal", "window", "two_sided_window", "causal_segments"])
def test_splash_interpret_matches_xla(kind):
    """T = S = 128 (splash's lane minimum), GQA H=2 over K=1: values and gradients."""
    B, T, H, K, D, scale = 1, 128, 2, 1, 8, 0.4
    q, k, v, w = _qkvw(B, T, T, H, K, D)
    mask = _mask(kind, B, T)

    def fn(q, k, v):
        return splash_attention(q, k, v, mask=mask, scale=scale, block_size=128, interpret=True)

    _check_against_xla(fn, q, k, v, w, mask, scale)


def test_splash_interpret_cross_attention_t_ne_s():
    """T=128 queries over S=256 keys in two 128-blocks."""
    q, k, v, w = _qkvw(1, 128, 256, 2, 2, 8, seed=1)
    mask = AttentionMask(causal=True)

    def fn(q, k, v):
        return splash_attention(q, k, v, mask=mask, block_size=128, interpret=True)

    _check_against_xla(fn, q, k, v, w, mask, None)


@pytest.mark.parametrize("kind", ["none", "causal", "causal_segments", "segments"])
def test_pallas_gpu_interpret_matches_xla(kind):
    """T = S = 32 in 16-blocks, GQA H=2 over K=1: values and gradients (the kernel's backward)."""
    B, T, H, K, D, scale = 2, 32, 2, 1, 8, 0.3
    q, k, v, w = _qkvw(B, T, T, H, K, D, seed=2)
    mask = _mask(kind, B, T)

    def fn(q, k, v):
        return pallas_gpu_attention(q, k, v, mask=mask, scale=scale, block_size=16, interpret=True)

    _check_against_xla(fn, q, k, v, w, mask, scale)


def test_flash_decode_interpret_matches_cached_attention():
    """One new token over a [B, K, D, S] cache with 37 of 64 slots written (4 splits of 16)."""
    B, S, H, K, D = 2, 64, 4, 2, 8
    q, k, v, _ = _qkvw(B, 37, 37, H, K, D, seed=3)
    cache = update_kv_cache(init_kv_cache(B, S, K, D), jnp.asarray(k), jnp.asarray(v))
    q1 = jnp.asarray(q[:, :1])
    vis = (jnp.arange(S) < cache.index)[None, None, None, :]
    ref = cached_attention(q1, cache, mask_BHTS=vis)
    out = flash_decode_attention(q1, cache, interpret=True)
    chex.assert_shape(out, (B, 1, H, D))
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)


def test_flash_decode_refuses_several_tokens():
    cache = init_kv_cache(1, 64, 1, 8)
    with pytest.raises(ValueError, match="T=2"):
        flash_decode_attention(jnp.zeros((1, 2, 2, 8)), cache)


def _all_masks(B, T):
    seg = _segments(B, T)
    return {
        "none": None,
        "causal": AttentionMask(causal=True),
        "window": AttentionMask(causal=True, window=4),
        "segments": AttentionMask(causal=True, q_segment_ids=seg, kv_segment_ids=seg),
        "kv_valid": AttentionMask(causal=True, kv_valid=jnp.ones((B, T), bool)),
        "positions": AttentionMask(causal=True, q_positions=jnp.arange(T)[None], kv_positions=jnp.arange(T)[None]),
        "dense": AttentionMask(dense=jnp.ones((1, 1, T, T), bool)),
    }


@pytest.mark.parametrize("with_bias", [False, True])
def test_auto_resolves_to_xla_or_chunked_on_cpu(with_bias):
    for T, want in ((256, "xla"), (4096, "chunked")):
        bias = jnp.zeros((1, 1, T, T)) if with_bias else None
        for name, mask in _all_masks(2, T).items():
            got = resolve_impl("cpu", (2, T, 4, 8), (2, T, 2, 8), mask=mask, bias=bias)
            assert got == want, (name, T, got)
    assert jax.default_backend() == "cpu"
    q, k, v, _ = _qkvw(2, 32, 32, 4, 2, 8, seed=4)
    for name in ("none", "causal", "segments", "kv_valid"):
        mask = _all_masks(2, 32)[name]
        bias = jnp.full((1, 4, 1, 32), 0.1) if with_bias else None
        out = attention(q, k, v, mask=mask, bias=bias, impl="auto")
        ref = attention(q, k, v, mask=mask, bias=bias, impl="xla")
        np.testing.assert_allclose(out, ref, atol=1e-6, err_msg=name)


def test_auto_resolution_on_tpu_and_gpu():
    masks = _all_masks(2, 256)
    q_shape, k_shape = (2, 256, 4, 64), (2, 256, 2, 64)

    def on(backend, name, dtype=jnp.float32, bias=None):
        return resolve_impl(backend, q_shape, k_shape, mask=masks[name], bias=bias, dtype=dtype)

    for name in ("none", "causal", "window", "segments"):
        assert on("tpu", name) == "splash", name
    for name in ("kv_valid", "positions", "dense"):
        assert on("tpu", name) == "chunked", name
        assert on("gpu", name) == "xla", name
        assert on("gpu", name, jnp.bfloat16) == "xla", name
    assert on("tpu", "causal", bias=jnp.zeros((1, 1, 256, 256))) == "chunked"
    assert resolve_impl("tpu", (1, 100, 4, 64), (1, 100, 4, 64), mask=masks["causal"]) == "chunked"  # T % 128
    for name in ("none", "causal", "window"):
        assert on("gpu", name, jnp.bfloat16) == "cudnn", name
    assert on("gpu", "segments", jnp.bfloat16) == "pallas_gpu"
    for name in ("none", "causal", "segments"):
        assert on("gpu", name) == "pallas_gpu", name  # float32: not cuDNN
    assert on("gpu", "window") == "xla"  # float32 sliding window: neither kernel


def test_explicit_kernels_refuse_masks_they_cannot_take():
    q, k, v, _ = _qkvw(2, 128, 128, 2, 1, 8)
    padded = AttentionMask(causal=True, kv_valid=jnp.ones((2, 128), bool))
    with pytest.raises(ValueError, match=r"impl='splash' cannot take mask\.kv_valid"):
        attention(q, k, v, mask=padded, impl="splash")
    with pytest.raises(ValueError, match=r"mask\.kv_valid"):
        splash_attention(q, k, v, mask=padded, interpret=True)
    with pytest.raises(ValueError, match="bias"):
        attention(q, k, v, mask=AttentionMask(causal=True), bias=jnp.zeros((1, 1, 128, 128)), impl="splash")
    with pytest.raises(ValueError, match=r"mask\.window"):
        attention(q, k, v, mask=AttentionMask(causal=True, window=8), impl="pallas_gpu")
    seg_q, seg_kv = _segments(2, 128), _segments(2, 128) + 0
    with pytest.raises(ValueError, match="kv_segment_ids"):
        attention(q, k, v, mask=AttentionMask(q_segment_ids=seg_q, kv_segment_ids=seg_kv), impl="splash")
    with pytest.raises(ValueError, match="multiples of 128"):
        attention(q[:, :100], k[:, :100], v[:, :100], mask=AttentionMask(causal=True), impl="splash")
    for impl in ("splash", "pallas_gpu"):  # a fitting mask, but no TPU/GPU here
        with pytest.raises(ValueError, match="the program is compiled for 'cpu'"):
            attention(q, k, v, mask=AttentionMask(causal=True), impl=impl)


@pytest.mark.parametrize("mask", [None, AttentionMask(causal=True), AttentionMask(causal=True, window=5)])
def test_cudnn_static_mask_arguments_express_the_mask(mask):
    """The is_causal / local_window_size given to cuDNN, run by jax's xla path, equal the dense mask."""
    q, k, v, _ = _qkvw(1, 24, 24, 4, 2, 8, seed=5)
    kw = attention_mod._static_dpa_kwargs(mask, 24, 24)
    assert kw is not None
    out = jax.nn.dot_product_attention(q, k, v, implementation="xla", **kw)
    np.testing.assert_allclose(out, attention(q, k, v, mask=mask, impl="xla"), atol=1e-6)
    assert attention_mod._static_dpa_kwargs(AttentionMask(window=5), 24, 24) is None  # two-sided: not cuDNN


def test_registry_reads_and_model_config_with_auto():
    from transformer_jax.models.config import ModelConfig
    from transformer_jax.nn.execution_config import ExecutionConfig

    for name in ("auto", "splash", "pallas_gpu", "chunked"):
        assert ATTENTION_IMPLS.reads(name) == ("block_size",), name
    cfg = ModelConfig(execution=ExecutionConfig(attention_impl="auto", attention_block_size=256))
    assert not unread.unread_fields(cfg)
