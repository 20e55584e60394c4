"""Behaviour of whole models: causality by gradient, padding invariance, scan == loop, remat,
dropout determinism, mixed precision, KV-cache decoding == full recompute."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.models import build_model

from .helpers import random_tokens, scanned_copy, tiny

DECODER_VARIANTS = {
    "gpt2": dict(preset="gpt2_tiny"),
    "llama_gqa": dict(preset="llama_tiny"),
    "alibi_post": dict(preset="gpt2_tiny", position="alibi", placement="post"),
    "relative_deepnorm": dict(preset="gpt2_tiny", position="relative_bias", placement="deepnorm"),
    "sinusoidal_window": dict(
        preset="gpt2_tiny", position="sinusoidal", attention_kind="sliding_window", attention_window=3
    ),
    "rope_chunked_scan": dict(preset="llama_tiny", attention_impl="chunked", attention_block_size=4, scan_layers=True),
    "linear_attention": dict(preset="llama_tiny", attention_kind="linear"),
}


def _cfg(variant):
    kw = dict(DECODER_VARIANTS[variant])
    return tiny(kw.pop("preset"), **kw)


def _input_grad_rows(fn, emb_BTD, t):
    """|d sum(logits[:, t] * w) / d emb[:, s]| summed over features, for every s."""
    w = jax.random.normal(jax.random.key(7), fn(emb_BTD).shape[-1:])
    g = jax.grad(lambda e: jnp.sum(fn(e)[:, t] * w))(emb_BTD)
    return np.abs(np.asarray(g)).sum(axis=(0, 2))


@pytest.mark.parametrize("variant", sorted(DECODER_VARIANTS))
def test_decoder_lm_is_causal_by_gradient(variant):
    model = build_model(_cfg(variant))
    T = 8
    emb = jax.random.normal(jax.random.key(0), (2, T, model.cfg.d_model))
    fn = lambda e: model(jnp.zeros((2, T), jnp.int32), embeddings_BTD=e)[0]
    for t in (0, 3, T - 1):
        rows = _input_grad_rows(fn, emb, t)
        assert np.all(rows[t + 1 :] == 0.0), (variant, t, rows)
        assert np.all(rows[: t + 1] > 0.0) or model.cfg.attention_kind == "sliding_window", (variant, t, rows)


def test_encoder_decoder_decoder_is_causal_by_gradient():
    model = build_model(tiny("original_tiny", dropout=0.0))
    src = random_tokens(jax.random.key(1), (2, 6), 100)
    memory, _ = model.encode(src)
    T = 7
    emb = jax.random.normal(jax.random.key(0), (2, T, model.cfg.d_model))
    fn = lambda e: model.decode(jnp.zeros((2, T), jnp.int32), memory, tgt_embeddings_BTD=e)[0]
    for t in (0, 2, T - 1):
        rows = _input_grad_rows(fn, emb, t)
        assert np.all(rows[t + 1 :] == 0.0) and np.all(rows[: t + 1] > 0.0), (t, rows)


@pytest.mark.parametrize("variant", ["gpt2", "llama_gqa", "relative_deepnorm"])
def test_padding_changes_no_real_output(variant):
    model = build_model(_cfg(variant))
    tokens = random_tokens(jax.random.key(0), (2, 10), 200)
    seg = jnp.array([[1] * 10, [1] * 6 + [0] * 4])
    other = tokens.at[1, 6:].set(random_tokens(jax.random.key(9), (4,), 200))
    a, _ = model(tokens, segment_ids_BT=seg)
    b, _ = model(other, segment_ids_BT=seg)
    np.testing.assert_array_equal(np.asarray(a[1, :6]), np.asarray(b[1, :6]))
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))


def test_packed_segments_do_not_see_each_other():
    model = build_model(_cfg("llama_gqa"))
    tokens = random_tokens(jax.random.key(0), (1, 10), 200)
    seg = jnp.array([[1] * 4 + [2] * 6])
    pos = jnp.array([list(range(4)) + list(range(6))])
    packed, _ = model(tokens, segment_ids_BT=seg, positions_BT=pos)
    alone, _ = model(tokens[:, 4:])
    np.testing.assert_allclose(np.asarray(packed[0, 4:]), np.asarray(alone[0]), atol=1e-5, rtol=1e-5)


def test_encoder_decoder_source_padding_is_invisible():
    model = build_model(tiny("original_tiny", dropout=0.0))
    src = random_tokens(jax.random.key(0), (2, 8), 100)
    src_seg = jnp.array([[1] * 8, [1] * 5 + [0] * 3])
    tgt = random_tokens(jax.random.key(1), (2, 5), 100)
    other = src.at[1, 5:].set(7)
    a, _ = model(src, tgt, src_segment_ids_BS=src_seg)
    b, _ = model(other, tgt, src_segment_ids_BS=src_seg)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("preset", ["llama_tiny", "original_tiny"])
def test_scan_equals_loop_and_remat_changes_nothing(preset):
    model = build_model(tiny(preset, dropout=0.0))
    scanned = scanned_copy(model)
    src = random_tokens(jax.random.key(0), (2, 6), 100)
    tgt = random_tokens(jax.random.key(1), (2, 6), 100)

    def loss(m):
        logits = m(tgt)[0] if preset == "llama_tiny" else m(src, tgt)[0]
        return jnp.mean(jax.nn.log_softmax(logits)[..., 3])

    l_loop, l_scan = loss(model), loss(scanned)
    np.testing.assert_allclose(float(l_loop), float(l_scan), rtol=1e-5)
    remat = scanned_copy(model, remat="full")
    g_scan = jax.tree.leaves(nnx.grad(loss)(scanned))
    g_remat = jax.tree.leaves(nnx.grad(loss)(remat))
    for a, b in zip(g_scan, g_remat):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_dropout_is_deterministic_per_key_and_off_without_key():
    model = build_model(tiny("gpt2_tiny", dropout=0.3))
    tokens = random_tokens(jax.random.key(0), (2, 8), 200)
    a = model(tokens, dropout_key=jax.random.key(1))[0]
    b = model(tokens, dropout_key=jax.random.key(1))[0]
    c = model(tokens, dropout_key=jax.random.key(2))[0]
    d = model(tokens)[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    assert not np.allclose(np.asarray(a), np.asarray(d))


def test_bfloat16_compute_keeps_float32_params_and_close_logits():
    cfg = tiny("llama_tiny")
    f32 = build_model(cfg)
    bf16 = build_model(dataclasses.replace(cfg, dtype="bfloat16"))
    chex.assert_trees_all_equal(nnx.state(f32, nnx.Param), nnx.state(bf16, nnx.Param))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(bf16, nnx.Param)))
    tokens = random_tokens(jax.random.key(0), (2, 8), 200)
    a, b = f32(tokens)[0], bf16(tokens)[0]
    assert b.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=0.1)


def test_deepnorm_scales_residual_branch_init_by_beta():
    from transformer_jax.ops.residual import deepnorm_constants

    cfg = tiny("gpt2_tiny", n_layers=6, init="xavier")
    post = build_model(dataclasses.replace(cfg, placement="post"))
    deep = build_model(dataclasses.replace(cfg, placement="deepnorm"))
    _, beta = deepnorm_constants(architecture="decoder_only", n_encoder_layers=0, n_decoder_layers=6, side="decoder")
    for name in ("v", "o"):
        a = np.asarray(getattr(post.layers.layers[0].self_attn, name).kernel[...])
        b = np.asarray(getattr(deep.layers.layers[0].self_attn, name).kernel[...])
        np.testing.assert_allclose(b, a * beta, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(deep.layers.layers[0].self_attn.q.kernel[...]),
        np.asarray(post.layers.layers[0].self_attn.q.kernel[...]),
    )
    assert deep.layers.layers[0].cfg.alpha == pytest.approx((2 * 6) ** 0.25)
