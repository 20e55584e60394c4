"""Behaviour of whole models: causality by gradient, padding invariance, scan == loop, remat,
dropout determinism, mixed precision, KV-cache decoding == full recompute."""

import dataclasses
from typing import cast

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.models import build_model, with_changes
from transformer_jax.nn.attention_config import LinearAttention, SlidingWindowAttention
from transformer_jax.nn.block import Block
from transformer_jax.nn.init import InitConfig
from transformer_jax.nn.positions import Learned, RelativeBias

from .helpers import build_lm, build_seq2seq, per_layer_flat, random_tokens, scanned_copy, tiny

DECODER_VARIANTS = {
    "gpt2": dict(preset="gpt2_tiny"),
    "llama_gqa": dict(preset="llama_tiny"),
    "alibi_post": dict(preset="gpt2_tiny", position="alibi", placement="post"),
    "relative_deepnorm": dict(preset="gpt2_tiny", position="relative_bias", placement="deepnorm"),
    "sinusoidal_window": dict(preset="gpt2_tiny", position="sinusoidal", attention=SlidingWindowAttention(window=3)),
    "rope_chunked_scan": dict(preset="llama_tiny", attention_impl="chunked", attention_block_size=4, scan_layers=True),
    "linear_attention": dict(preset="llama_tiny", attention=LinearAttention()),
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
    model = build_lm(_cfg(variant))
    T = 8
    emb = jax.random.normal(jax.random.key(0), (2, T, model.cfg.dims.d_model))
    fn = lambda e: model(jnp.zeros((2, T), jnp.int32), embeddings_BTD=e)[0]
    for t in (0, 3, T - 1):
        rows = _input_grad_rows(fn, emb, t)
        assert np.all(rows[t + 1 :] == 0.0), (variant, t, rows)
        assert np.all(rows[: t + 1] > 0.0) or model.cfg.attention.kind == "sliding_window", (variant, t, rows)


@pytest.mark.parametrize(
    ("preset", "n_layers", "impl"), [("gpt2_tiny", 2, "xla"), ("llama_tiny", 1, "chunked")], ids=["2_layers", "chunked"]
)
def test_sliding_window_gradient_stops_at_the_receptive_field(preset, n_layers, impl):
    """Window W: each layer's query t sees keys t-W+1..t, so after L layers d logits_t / d input_s
    is exactly 0 for s < t - L (W - 1) and for s > t, and non-zero for every s in between. Breaks
    if the window is one wider or narrower (in any layer), or if the window leaks the future."""
    W = 3
    cfg = tiny(
        preset,
        n_layers=n_layers,
        attention=SlidingWindowAttention(window=W),
        attention_impl=impl,
        **({} if impl == "xla" else {"attention_block_size": 4}),
    )
    model = build_lm(cfg)
    T, t_B = 12, np.array([1, 6, 11])  # batch row b probes output t_B[b]: one backward pass for all
    emb_BTD = jax.random.normal(jax.random.key(0), (len(t_B), T, cfg.dims.d_model))
    probe_BTV = (
        jnp.zeros((len(t_B), T, cfg.dims.vocab_size))
        .at[np.arange(len(t_B)), t_B]
        .set(jax.random.normal(jax.random.key(7), (len(t_B), cfg.dims.vocab_size)))
    )
    fn = lambda e: jnp.sum(model(jnp.zeros(e.shape[:2], jnp.int32), embeddings_BTD=e)[0] * probe_BTV)
    rows_BT = np.abs(np.asarray(jax.grad(fn)(emb_BTD))).sum(-1)
    for t, rows_T in zip(t_B, rows_BT):
        first = max(t - n_layers * (W - 1), 0)
        assert np.all(rows_T[:first] == 0.0) and np.all(rows_T[t + 1 :] == 0.0), (t, rows_T)
        assert np.all(rows_T[first : t + 1] > 0.0), (t, rows_T)


def test_encoder_decoder_decoder_is_causal_by_gradient():
    model = build_seq2seq(tiny("original_tiny", dropout=0.0))
    src = random_tokens(jax.random.key(1), (2, 6), 100)
    memory, _ = model.encode(src)
    T = 7
    emb = jax.random.normal(jax.random.key(0), (2, T, model.cfg.dims.d_model))
    fn = lambda e: model.decode(jnp.zeros((2, T), jnp.int32), memory, tgt_embeddings_BTD=e)[0]
    for t in (0, 2, T - 1):
        rows = _input_grad_rows(fn, emb, t)
        assert np.all(rows[t + 1 :] == 0.0) and np.all(rows[: t + 1] > 0.0), (t, rows)


# Segment ids (0 = padding) of the padding tests: no padding, left, middle and right padding, 8
# real tokens in each padded row. Right padding alone proves nothing in a causal LM (no real token
# ever looks ahead at it); the real tokens after a left or middle pad are what a mask that is
# ignored lets see the pad.
PAD_SEG_BT = np.array([[1] * 12, [0] * 4 + [1] * 8, [1] * 3 + [0] * 4 + [1] * 5, [1] * 8 + [0] * 4])


def _real_positions(seg_BT):
    """Each token's index among its row's real tokens (a pad takes the previous real one's, or 0)."""
    return jnp.maximum(jnp.cumsum(seg_BT != 0, axis=1) - 1, 0)


def _other_pads(tokens_BT, seg_BT, vocab):
    """tokens_BT (ids in [1, vocab)) with every pad replaced by a different id."""
    return jnp.where(seg_BT == 0, tokens_BT % (vocab - 1) + 1, tokens_BT)


def _after_a_pad(seg_BT):
    """Real tokens with a pad somewhere before them in their row."""
    real = np.asarray(seg_BT) != 0
    return real & (np.cumsum(~real, axis=1) > 0)


@pytest.mark.parametrize("variant", ["gpt2", "llama_gqa", "relative_deepnorm", "alibi_post", "rope_chunked_scan"])
def test_padding_anywhere_is_invisible(variant):
    """Left, middle and right padding (segment id 0): changing the pad tokens leaves every real
    logit bit-identical, and with positions counting real tokens only the real logits equal the
    unpadded rows'. Breaks if self-attention ignores the padding mask (the pads reach the real
    tokens after them: checked with all-ones segment ids) or if a position encoding (the relative
    bias) reads the token index instead of ``positions_BT``."""
    model = build_lm(_cfg(variant))
    if isinstance(model.positions, Learned | RelativeBias):  # tables at unit scale, so that a
        table = model.positions.table  # misplaced position moves the logits well past 1e-5
        table[...] = jax.random.normal(jax.random.key(3), table.shape)
    seg_BT = jnp.asarray(PAD_SEG_BT)
    real_BT = PAD_SEG_BT != 0
    tokens_BT = random_tokens(jax.random.key(0), seg_BT.shape, 200)
    other_BT = _other_pads(tokens_BT, seg_BT, 200)
    # rows 1-3's 8 real tokens, unpadded (a causal LM never sees what follows, so filling the
    # rest of the row changes nothing)
    alone_BT = jnp.pad(tokens_BT[1:][real_BT[1:]].reshape(3, 8), ((0, 0), (0, 4)), constant_values=1)
    alone_seg_BT = jnp.asarray(PAD_SEG_BT[3:]).repeat(3, axis=0)
    # one batch: padded, pads changed, pads changed with no mask, unpadded
    batch_BT = jnp.concatenate([tokens_BT, other_BT, other_BT, alone_BT])
    batch_seg_BT = jnp.concatenate([seg_BT, seg_BT, jnp.ones_like(seg_BT), alone_seg_BT])
    out_BTV = np.asarray(model(batch_BT, segment_ids_BT=batch_seg_BT, positions_BT=_real_positions(batch_seg_BT))[0])
    a_BTV, b_BTV, unmasked_BTV, alone_BTV = out_BTV[:4], out_BTV[4:8], out_BTV[8:12], out_BTV[12:, :8]
    np.testing.assert_array_equal(a_BTV[real_BT], b_BTV[real_BT])
    assert np.all(np.abs(unmasked_BTV - a_BTV).max(-1)[_after_a_pad(seg_BT)] > 0)
    np.testing.assert_allclose(a_BTV[1:][real_BT[1:]].reshape(alone_BTV.shape), alone_BTV, rtol=1e-5, atol=1e-5)


def test_packed_segments_do_not_see_each_other():
    model = build_lm(_cfg("llama_gqa"))
    tokens = random_tokens(jax.random.key(0), (1, 10), 200)
    seg = jnp.array([[1] * 4 + [2] * 6])
    pos = jnp.array([list(range(4)) + list(range(6))])
    packed, _ = model(tokens, segment_ids_BT=seg, positions_BT=pos)
    alone, _ = model(tokens[:, 4:])
    np.testing.assert_allclose(np.asarray(packed[0, 4:]), np.asarray(alone[0]), atol=1e-5, rtol=1e-5)


def test_encoder_decoder_padding_is_invisible():
    """Source padding (right, left) and target padding (left, middle): changing either side's pad
    tokens leaves every real target logit bit-identical, and with positions counting real tokens
    the real logits equal the unpadded pair's. Breaks if the encoder, the cross-attention or the
    decoder self-attention ignores its padding mask (the target check is shown to have teeth with
    all-ones target segment ids), or if the relative positions ignore ``tgt_positions_BT``."""
    model = build_seq2seq(tiny("original_tiny", dropout=0.0, position="relative_bias"))
    for positions in (model.src_positions, model.tgt_positions):  # unit scale: positions matter
        table = cast(RelativeBias, positions).table
        table[...] = jax.random.normal(jax.random.key(3), table.shape)
    src_seg_BS = jnp.array([[1] * 8, [1] * 5 + [0] * 3, [0] * 3 + [1] * 5])
    tgt_seg_BT = jnp.array([[1] * 7, [0] * 3 + [1] * 4, [1] * 2 + [0] * 3 + [1] * 2])
    src_real_BS, tgt_real_BT = np.asarray(src_seg_BS) != 0, np.asarray(tgt_seg_BT) != 0
    src_BS = random_tokens(jax.random.key(0), src_seg_BS.shape, 100)
    tgt_BT = random_tokens(jax.random.key(1), tgt_seg_BT.shape, 100)
    other_src_BS, other_tgt_BT = _other_pads(src_BS, src_seg_BS, 100), _other_pads(tgt_BT, tgt_seg_BT, 100)
    # one batch: padded, source pads changed, target pads changed, target pads changed with no mask
    src_seg, tgt_seg = jnp.tile(src_seg_BS, (4, 1)), jnp.concatenate([tgt_seg_BT] * 3 + [jnp.ones_like(tgt_seg_BT)])
    out_BTV = model(
        jnp.concatenate([src_BS, other_src_BS, src_BS, src_BS]),
        jnp.concatenate([tgt_BT, tgt_BT, other_tgt_BT, other_tgt_BT]),
        src_segment_ids_BS=src_seg,
        tgt_segment_ids_BT=tgt_seg,
        src_positions_BS=_real_positions(src_seg),
        tgt_positions_BT=_real_positions(tgt_seg),
    )[0]
    a_BTV, src_changed_BTV, tgt_changed_BTV, unmasked_BTV = np.split(np.asarray(out_BTV), 4)
    np.testing.assert_array_equal(src_changed_BTV, a_BTV)
    np.testing.assert_array_equal(tgt_changed_BTV[tgt_real_BT], a_BTV[tgt_real_BT])
    assert np.all(np.abs(unmasked_BTV - a_BTV).max(-1)[_after_a_pad(tgt_seg_BT)] > 0)
    # as if the pads were not there: rows 1-2 hold 5 real source and 4 real target tokens
    src_alone_BS = src_BS[1:][src_real_BS[1:]].reshape(2, 5)
    alone_BTV = np.asarray(model(src_alone_BS, tgt_BT[1:][tgt_real_BT[1:]].reshape(2, 4))[0])
    np.testing.assert_allclose(a_BTV[1:][tgt_real_BT[1:]].reshape(alone_BTV.shape), alone_BTV, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("preset", ["llama_tiny", "original_tiny"])
def test_scan_equals_loop_and_remat_changes_nothing(preset):
    """The scanned stack (same weights, stacked) gives the loop's logits elementwise and the
    loop's gradient for every parameter, layer by layer; full remat gives the scan's gradients.
    Breaks if the scan runs the layers in another order, pairs a layer with another's weights,
    or drops / misroutes the gradient of a stacked parameter."""
    cfg = tiny(preset, dropout=0.0)
    model = build_model(cfg)
    scanned = scanned_copy(model)
    src_BS = random_tokens(jax.random.key(0), (2, 6), 100)
    tgt_BT = random_tokens(jax.random.key(1), (2, 6), 100)
    w_BTV = jax.random.normal(jax.random.key(2), (2, 6, cfg.dims.vocab_size))

    def loss(m):
        logits_BTV = m(tgt_BT)[0] if preset == "llama_tiny" else m(src_BS, tgt_BT)[0]
        return jnp.sum(jax.nn.log_softmax(logits_BTV) * w_BTV), logits_BTV  # touches every logit

    def grads_and_logits(m):
        (_, logits_BTV), g = nnx.value_and_grad(loss, has_aux=True)(m)
        return per_layer_flat(g), np.asarray(logits_BTV)

    g_loop, logits_loop = grads_and_logits(model)
    g_scan, logits_scan = grads_and_logits(scanned)
    g_remat, _ = grads_and_logits(scanned_copy(model, remat="full"))
    np.testing.assert_allclose(logits_scan, logits_loop, rtol=1e-5, atol=1e-6)
    assert g_scan.keys() == g_loop.keys() == g_remat.keys()
    # float32 sums in another order: errors ~5e-7 of a leaf's largest entry, and for leaves whose
    # exact gradient is 0 (key biases: softmax ignores a per-query constant) ~1e-8 of the largest
    global_scale = max(float(np.abs(g).max()) for g in g_loop.values())
    for path, g in g_loop.items():
        atol = 1e-5 * max(float(np.abs(g).max()), 1e-2 * global_scale)
        for other in (g_scan, g_remat):
            np.testing.assert_allclose(np.asarray(other[path]), g, rtol=1e-4, atol=atol, err_msg=str(path))


def test_dropout_is_deterministic_per_key_and_off_without_key():
    model = build_lm(tiny("gpt2_tiny", dropout=0.3))
    tokens = random_tokens(jax.random.key(0), (2, 8), 200)
    a = model(tokens, dropout_key=jax.random.key(1))[0]
    b = model(tokens, dropout_key=jax.random.key(1))[0]
    c = model(tokens, dropout_key=jax.random.key(2))[0]
    d = model(tokens)[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    assert not np.allclose(np.asarray(a), np.asarray(d))


def test_bfloat16_compute_keeps_float32_params_and_close_logits():
    """bf16 compute keeps float32 params, and logits and every layer's residual stream stay within
    bf16's rounding error of the float32 model's.

    bf16 keeps 8 significant bits, so one rounding is off by at most u = 2^-8 (relative). A logit
    of llama_tiny goes through about n = 2 + 15 L roundings in series (embedding; per layer: norm,
    q/k/v, RoPE, scores, softmax, p @ v, o, residual add, norm, gate/up, SiLU * up, down, residual
    add; final norm, head); independent errors add in quadrature, so rms(err) <= sqrt(n) u std
    (0.022 std for L = 2; measured 0.005) and the largest of the B*T*V errors <= 4 sqrt(n) u std.
    The residual stream entering layer l has seen 1 + 15 l roundings. Breaks if bf16 runs some
    layer with wrong values: skipping every FFN in bf16 gives 0.12 std rms logit error (the old
    atol=0.1, i.e. 0.6 std, let that pass).
    """
    cfg = tiny("llama_tiny")
    f32 = build_lm(cfg)
    bf16 = build_lm(with_changes(cfg, dtype="bfloat16"))
    chex.assert_trees_all_equal(nnx.state(f32, nnx.Param), nnx.state(bf16, nnx.Param))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(bf16, nnx.Param)))
    tokens = random_tokens(jax.random.key(0), (2, 8), 200)
    (a_BTV, a_aux), (b_BTV, b_aux) = f32(tokens, return_hidden=True), bf16(tokens, return_hidden=True)
    assert b_BTV.dtype == jnp.float32 and b_aux["hidden"].dtype == jnp.bfloat16
    u, per_layer = 2.0**-8, 15
    a_BTV, b_BTV = np.asarray(a_BTV), np.asarray(b_BTV)
    rms = lambda x: float(np.sqrt(np.mean(x**2)))
    bound = float(np.sqrt(2 + per_layer * cfg.dims.n_layers) * u * a_BTV.std())
    assert rms(a_BTV - b_BTV) <= bound, ("logits", rms(a_BTV - b_BTV), bound)
    assert np.abs(a_BTV - b_BTV).max() <= 4 * bound, ("logits", np.abs(a_BTV - b_BTV).max(), 4 * bound)
    a_LBTD, b_LBTD = np.asarray(a_aux["hidden"]), np.asarray(b_aux["hidden"], np.float32)
    for layer, (a_BTD, b_BTD) in enumerate(zip(a_LBTD, b_LBTD)):
        bound = float(np.sqrt(1 + per_layer * layer) * u * a_BTD.std())
        assert rms(a_BTD - b_BTD) <= bound, (f"stream into layer {layer}", rms(a_BTD - b_BTD), bound)


def test_deepnorm_scales_residual_branch_init_by_beta():
    from transformer_jax.ops.residual import deepnorm_constants

    cfg = tiny("gpt2_tiny", n_layers=6, init=InitConfig(scheme="xavier"))
    post = build_lm(dataclasses.replace(cfg, placement="post"))
    deep = build_lm(dataclasses.replace(cfg, placement="deepnorm"))
    _, beta = deepnorm_constants(architecture="decoder_only", n_encoder_layers=0, n_decoder_layers=6, side="decoder")
    first_block = lambda m: cast("nnx.List[Block]", m.layers.layers)[0]
    for name in ("v", "o"):
        a = np.asarray(getattr(first_block(post).self_attn, name).kernel[...])
        b = np.asarray(getattr(first_block(deep).self_attn, name).kernel[...])
        np.testing.assert_allclose(b, a * beta, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(first_block(deep).self_attn.q.kernel[...]),
        np.asarray(first_block(post).self_attn.q.kernel[...]),
    )
    assert first_block(deep).cfg.residual.alpha == pytest.approx((2 * 6) ** 0.25)
