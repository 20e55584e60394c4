"""attention(): every mask kind and impl against a float64 numpy reference; impls agree in
values and gradients; GQA/MQA/cross-attention; error paths; linear attention vs naive loops."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.attention import ATTENTION_IMPLS, ATTENTION_KINDS, attention
from transformer_jax.ops.linear_attention import linear_attention
from transformer_jax.ops.masks import (
    AttentionMask,
    padding_mask_from_ids,
    padding_mask_from_lengths,
)

B, H, D, BLOCK = 2, 4, 8, 4
IMPLS = ("xla", "chunked")


def np_attention(q, k, v, vis, bias=None, scale=None):
    """float64 softmax(Q K^T * scale + bias, masked) V; rows with no visible key give 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    G = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)
    logits = np.einsum("bthd,bshd->bhts", q, k) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        logits = logits + np.asarray(bias, np.float64)
    vis = np.broadcast_to(vis, logits.shape)
    logits = np.where(vis, logits, -np.inf)
    m = logits.max(-1, keepdims=True)
    p = np.exp(logits - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0), v)


def _qkv(rng, T, S, K):
    q = rng.standard_normal((B, T, H, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, S, K, D)).astype(np.float32) for _ in range(2))
    return q, k, v


def _pos_vis(qp, kp, pred):
    """[B|1, 1, T, S] visibility from query/key positions and a predicate of (q_pos, kv_pos)."""
    qp, kp = np.atleast_2d(qp), np.atleast_2d(kp)
    return pred(qp[:, None, :, None], kp[:, None, None, :])


def make_case(name, rng):
    """(T, S, K, mask, numpy visibility, bias, kind, window) for one named mask kind."""
    T = S = 10
    K, mask, vis, bias, kind, window = 2, None, np.ones((1, 1, T, S), bool), None, "softmax", None
    tt, ss = np.arange(T), np.arange(S)
    causal = _pos_vis(tt, ss, lambda a, b: b <= a)
    if name == "causal":
        mask, vis = AttentionMask(causal=True), causal
    elif name == "padding_lengths":  # batch 1 has no valid key: fully masked rows
        lengths = np.array([7, 0])
        mask = AttentionMask(kv_valid=padding_mask_from_lengths(lengths, S))
        vis = (ss[None, :] < lengths[:, None])[:, None, None, :]
    elif name == "padding_ids_mqa":
        ids = rng.integers(0, 4, (B, S))
        K, mask = 1, AttentionMask(causal=True, kv_valid=padding_mask_from_ids(ids, 0))
        vis = (ids != 0)[:, None, None, :] & causal
    elif name == "segments":  # two packed sequences per row, given once (self-attention)
        seg = np.array([[1] * 4 + [2] * 6, [1] * 7 + [2] * 3])
        mask = AttentionMask(causal=True, q_segment_ids=jnp.asarray(seg))
        vis = (seg[:, :, None] == seg[:, None, :])[:, None] & causal
    elif name == "sliding_window":
        kind, window, vis = "sliding_window", 3, _pos_vis(tt, ss, lambda a, b: np.abs(a - b) < 3)
    elif name == "causal_window_mha":
        K, kind, window, mask = H, "sliding_window", 3, AttentionMask(causal=True)
        vis = _pos_vis(tt, ss, lambda a, b: (b <= a) & (a - b < 3))
    elif name == "dense":
        vis = rng.random((B, H, T, S)) < 0.6
        vis[0, 1, 2] = False
        mask = AttentionMask(dense=jnp.asarray(vis))
    elif name == "bias":
        bias = rng.standard_normal((1, H, T, S)).astype(np.float32)
    elif name == "causal_bias_padding":
        bias = rng.standard_normal((B, 1, T, S)).astype(np.float32)
        lengths = np.array([8, 0])  # batch 1: fully masked rows
        mask = AttentionMask(causal=True, kv_valid=padding_mask_from_lengths(lengths, S))
        vis = causal & (ss < lengths[:, None])[:, None, None]
    elif name == "cross_mqa":  # T != S; queries at positions -2..3, so the first two see no key
        T, K, qp = 6, 1, np.arange(6) - 2
        qs, ks = np.array([[0, 0, 1, 1, 2, 2]] * B), np.array([[0] * 4 + [1] * 6] * B)
        mask = AttentionMask(
            causal=True,
            q_positions=jnp.asarray(qp)[None],
            q_segment_ids=jnp.asarray(qs),
            kv_segment_ids=jnp.asarray(ks),
        )
        vis = _pos_vis(qp, ss, lambda a, b: b <= a) & (qs[:, :, None] == ks[:, None, :])[:, None]
    else:
        raise AssertionError(name)
    return T, S, K, mask, vis, bias, kind, window


CASES = (
    "causal",
    "padding_lengths",
    "padding_ids_mqa",
    "segments",
    "sliding_window",
    "causal_window_mha",
    "dense",
    "bias",
    "causal_bias_padding",
    "cross_mqa",
)
GRAD_CASES = ("causal_bias_padding", "cross_mqa")
STATIC = ("kind", "impl", "window", "block_size", "scale")
_attend = jax.jit(attention, static_argnames=STATIC)


def _loss(q, k, v, bias, w, **kw):
    out = attention(q, k, v, bias=bias, **kw)
    return jnp.sum(out * w), out


_value_and_grads = jax.jit(jax.value_and_grad(_loss, argnums=(0, 1, 2, 3), has_aux=True), static_argnames=STATIC)


def _case_inputs(case):
    T, S, K, mask, vis, bias, kind, window = make_case(case, np.random.default_rng(len(case)))
    q, k, v = _qkv(np.random.default_rng(1), T, S, K)
    return (q, k, v), vis, bias, dict(mask=mask, kind=kind, window=window, block_size=BLOCK)


@pytest.mark.parametrize("case", CASES)
def test_matches_numpy_reference(case):
    (q, k, v), vis, bias, kw = _case_inputs(case)
    want = np_attention(q, k, v, vis, bias)
    for impl in IMPLS:
        out = _attend(q, k, v, bias=bias, impl=impl, **kw)
        chex.assert_shape(out, q.shape)
        np.testing.assert_allclose(out, want, atol=1e-5, rtol=1e-5, err_msg=impl)


@pytest.mark.parametrize("case", GRAD_CASES)
def test_impls_agree_in_values_and_gradients(case):
    (q, k, v), vis, bias, kw = _case_inputs(case)
    bias_in = np.zeros((1, 1) + vis.shape[2:], np.float32) if bias is None else bias  # dbias too
    w = np.random.default_rng(2).standard_normal(q.shape).astype(np.float32)
    (_, out_x), g_x = _value_and_grads(q, k, v, bias_in, w, impl="xla", **kw)
    (_, out_c), g_c = _value_and_grads(q, k, v, bias_in, w, impl="chunked", **kw)
    np.testing.assert_allclose(out_x, np_attention(q, k, v, vis, bias), atol=1e-5)
    np.testing.assert_allclose(out_c, out_x, atol=1e-5, rtol=1e-5)
    for name, a, b in zip(("dq", "dk", "dv", "dbias"), g_x, g_c):
        chex.assert_equal_shape([a, b])
        assert np.all(np.isfinite(b)), name
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=name)
    empty = ~np.broadcast_to(vis, (B, H, q.shape[1], k.shape[1])).any(-1)  # [B, H, T]
    assert empty.any()  # rows that see nothing: output 0 and no gradient to their queries
    np.testing.assert_array_equal(np.asarray(out_c).transpose(0, 2, 1, 3)[empty], 0.0)
    np.testing.assert_array_equal(np.asarray(g_c[0]).transpose(0, 2, 1, 3)[empty], 0.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_causality_by_gradient(impl):
    """Output row t has zero gradient wrt keys, values and bias columns after t."""
    (q, k, v), _, bias, kw = _case_inputs("causal_bias_padding")  # reuses the compiled step
    t, w = 4, np.zeros(q.shape, np.float32)
    w[:, t] = 1.0
    _, (dq, dk, dv, dbias) = _value_and_grads(q, k, v, bias, w, impl=impl, **kw)
    for g in (dk, dv):
        np.testing.assert_array_equal(g[:, t + 1 :], 0.0)
        assert np.abs(g[:, : t + 1]).sum() > 0
    np.testing.assert_array_equal(dbias[:, :, :, t + 1 :], 0.0)
    np.testing.assert_array_equal(np.delete(np.asarray(dq), t, axis=1), 0.0)


class AttentionVariantsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*IMPLS)
    def test_gqa_causal_padding_bias(self, impl):
        rng = np.random.default_rng(3)
        T = S = 9
        q, k, v = _qkv(rng, T, S, K=2)
        bias = rng.standard_normal((B, H, T, S)).astype(np.float32)
        lengths = np.array([9, 5])
        mask = AttentionMask(causal=True, kv_valid=padding_mask_from_lengths(lengths, S))
        fn = self.variant(functools.partial(attention, impl=impl, block_size=BLOCK))
        out = fn(q, k, v, mask=mask, bias=bias)
        chex.assert_shape(out, (B, T, H, D))
        chex.assert_type(out, jnp.float32)
        vis = (
            _pos_vis(np.arange(T), np.arange(S), lambda a, b: b <= a) & (np.arange(S) < lengths[:, None])[:, None, None]
        )
        np.testing.assert_allclose(out, np_attention(q, k, v, vis, bias), atol=1e-5, rtol=1e-5)


def test_custom_scale():
    q, k, v = _qkv(np.random.default_rng(4), 5, 5, 2)
    vis = np.ones((1, 1, 5, 5), bool)
    for impl in IMPLS:
        np.testing.assert_allclose(
            _attend(q, k, v, impl=impl, scale=0.3), np_attention(q, k, v, vis, scale=0.3), atol=1e-5
        )


def test_cudnn_is_a_clear_error_on_cpu():
    if jax.default_backend() == "gpu":
        pytest.skip("runs on CPU only")
    q, k, v = _qkv(np.random.default_rng(0), 4, 4, 2)
    with pytest.raises(ValueError, match=r"impl='cudnn'.*'xla'.*'chunked'"):
        attention(q, k, v, impl="cudnn")


def test_registries_list_the_variants():
    assert set(ATTENTION_IMPLS.names()) >= {"xla", "cudnn", "chunked"}
    assert set(ATTENTION_KINDS.names()) >= {"softmax", "sliding_window", "linear"}
    q, k, v = _qkv(np.random.default_rng(0), 4, 4, 2)
    with pytest.raises(KeyError, match="chunked"):
        attention(q, k, v, impl="chunkd")


@pytest.mark.parametrize(
    "kwargs,shapes,match",
    [
        ({}, ((B, 4, 3, D), (B, 4, 2, D), (B, 4, 2, D)), "H=3.*K=2"),
        ({}, ((B, 4, 4, D), (B, 4, 2, D), (B, 5, 2, D)), "equal shape"),
        ({}, ((B, 4, 4, D), (B, 4, 2, D + 1), (B, 4, 2, D + 1)), "head dim"),
        ({"kind": "sliding_window"}, None, "window=<int>"),
        ({"window": 3}, None, "kind='sliding_window'"),
        ({"mask": AttentionMask(kv_valid=jnp.ones((B, 3), bool))}, None, "kv_valid"),
        ({"kind": "linear", "bias": np.zeros((1, 1, 4, 4), np.float32)}, None, "bias"),
        (
            {"kind": "linear", "mask": AttentionMask(q_segment_ids=jnp.zeros((B, 4), int))},
            None,
            "segment",
        ),
        ({"kind": "linear", "window": 2}, None, "window"),
    ],
)
def test_errors_name_the_argument(kwargs, shapes, match):
    shapes = shapes or ((B, 4, 4, D), (B, 4, 2, D), (B, 4, 2, D))
    q, k, v = (np.zeros(s, np.float32) for s in shapes)
    with pytest.raises(ValueError, match=match):
        attention(q, k, v, **kwargs)


# ---------------------------------------------------------------- linear attention


def _phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


def np_linear_recurrent(q, k, v, kv_valid):
    """Naive loop of the RNN form: S_t = S_{t-1} + phi(k_t)^T v_t, z_t = z_{t-1} + phi(k_t),
    out_t = phi(q_t) S_t / phi(q_t) z_t."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    Bq, T, Hq, _ = q.shape
    G = Hq // k.shape[2]
    out = np.zeros(q.shape[:3] + v.shape[-1:])
    for b, h in np.ndindex(Bq, Hq):
        state, z = 0.0, 0.0
        for t in range(T):
            if kv_valid[b, t]:
                state = state + np.outer(_phi(k[b, t, h // G]), v[b, t, h // G])
                z = z + _phi(k[b, t, h // G])
            den = _phi(q[b, t, h]) @ z if np.ndim(z) else 0.0
            out[b, t, h] = _phi(q[b, t, h]) @ state / den if den > 0 else 0.0
    return out


def np_linear_closed(q, k, v, kv_valid):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    G = q.shape[2] // k.shape[2]
    fk = _phi(np.repeat(k, G, 2)) * kv_valid[:, :, None, None]
    num = np.einsum("bthd,bshd,bshe->bthe", _phi(q), fk, np.repeat(v, G, 2))
    den = np.einsum("bthd,bshd->bth", _phi(q), fk)[..., None]
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


class LinearAttentionTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((True, 4), (False, 4))
    def test_matches_naive_forms(self, causal, chunk):
        T = 11
        q, k, v = _qkv(np.random.default_rng(5), T, T, 2)
        kv_valid = np.ones((B, T), bool)
        kv_valid[1, 3:] = False
        kv_valid[1, :2] = False  # batch 1, rows 0-1 see no key in the causal form
        fn = self.variant(functools.partial(linear_attention, causal=causal, chunk_size=chunk))
        out = fn(q, k, v, kv_valid=kv_valid)
        chex.assert_shape(out, (B, T, H, D))
        ref = np_linear_recurrent if causal else np_linear_closed
        np.testing.assert_allclose(out, ref(q, k, v, kv_valid), atol=1e-5, rtol=1e-5)

    def test_causal_equals_noncausal_on_each_prefix(self):
        T = 5
        q, k, v = _qkv(np.random.default_rng(6), T, T, 1)

        @jax.jit
        def both(q, k, v):
            prefixes = [linear_attention(q[:, : t + 1], k[:, : t + 1], v[:, : t + 1])[:, t] for t in range(T)]
            return linear_attention(q, k, v, causal=True, chunk_size=2), jnp.stack(prefixes, 1)

        np.testing.assert_allclose(*both(q, k, v), atol=1e-5, rtol=1e-5)

    def test_through_attention_kind_with_finite_gradients(self):
        T = 6
        q, k, v = _qkv(np.random.default_rng(7), T, T, 2)
        valid = np.array([[True] * T, [False] * T])
        mask = AttentionMask(causal=True, kv_valid=jnp.asarray(valid))
        out = _attend(q, k, v, mask=mask, kind="linear")  # default chunk_size 64 > T
        np.testing.assert_allclose(out, np_linear_recurrent(q, k, v, valid), atol=1e-5)
        grads = jax.jit(jax.grad(lambda *a: attention(*a, mask=mask, kind="linear").sum(), argnums=(0, 1, 2)))(q, k, v)
        for g in grads:
            assert np.all(np.isfinite(g))
        np.testing.assert_array_equal(grads[0][1], 0.0)
