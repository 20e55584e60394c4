"""chunked (FlashAttention-style) attention: ragged lengths, broadcast bias gradients, no T x T
buffer at T=8192 (compiled HLO and memory analysis), and agreement with xla at T=1024."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.attention import attention
from transformer_jax.ops.chunked_attention import chunked_attention
from transformer_jax.ops.masks import AttentionMask, padding_mask_from_lengths


def np_attention(q, k, v, vis, bias, scale):
    """float64 softmax(Q K^T * scale + bias, masked) V with GQA; rows with no visible key give 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    G = q.shape[2] // k.shape[2]
    logits = np.einsum("bthd,bshd->bhts", q, np.repeat(k, G, 2)) * scale + bias
    logits = np.where(np.broadcast_to(vis, logits.shape), logits, -np.inf)
    m = logits.max(-1, keepdims=True)
    p = np.exp(logits - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0), np.repeat(v, G, 2))


def _loss_fn(impl, **kw):
    def loss(q, k, v, bias, w):
        out = attention(q, k, v, bias=bias, impl=impl, **kw)
        return jnp.sum(out * w), out

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))


def test_ragged_lengths_gqa_broadcast_bias_against_numpy_and_xla():
    """T=37, S=53, block 16: both lengths padded; bias [1, H, 1, S] broadcasts over B and T."""
    B, T, S, H, K, D, scale = 2, 37, 53, 4, 2, 8, 0.3
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, T, H, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, S, K, D)).astype(np.float32) for _ in range(2))
    bias = rng.standard_normal((1, H, 1, S)).astype(np.float32)
    w = rng.standard_normal((B, T, H, D)).astype(np.float32)
    lengths = np.array([50, 0])
    q_pos = np.arange(T) + 10
    mask = AttentionMask(
        causal=True,
        window=20,
        q_positions=jnp.asarray(q_pos)[None],
        kv_valid=padding_mask_from_lengths(lengths, S),
    )
    d = q_pos[:, None] - np.arange(S)[None, :]
    vis = ((d >= 0) & (d < 20))[None, None] & (np.arange(S) < lengths[:, None])[:, None, None]

    (_, out_c), g_c = _loss_fn("chunked", mask=mask, scale=scale, block_size=16)(q, k, v, bias, w)
    (_, out_x), g_x = _loss_fn("xla", mask=mask, scale=scale)(q, k, v, bias, w)
    chex.assert_shape(out_c, (B, T, H, D))
    np.testing.assert_allclose(out_c, np_attention(q, k, v, vis, bias, scale), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(out_c[1], 0.0)  # batch 1 has no valid key
    for name, a, b, x in zip(("dq", "dk", "dv", "dbias"), g_x, g_c, (q, k, v, bias)):
        chex.assert_shape(b, x.shape)
        assert np.all(np.isfinite(b)), name
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=name)
    np.testing.assert_array_equal(g_c[0][1], 0.0)


def test_block_larger_than_sequence_and_eager_call():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 5, 2, 4)).astype(np.float32) for _ in range(3))
    out = chunked_attention(q, k, v, mask=AttentionMask(causal=True))  # block 512 clipped to 5
    vis = np.tril(np.ones((5, 5), bool))
    np.testing.assert_allclose(out, np_attention(q, k, v, vis, 0.0, 0.5), atol=1e-5, rtol=1e-5)


def test_bfloat16_inputs_keep_their_dtype():
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 20, 2, 8)), jnp.bfloat16) for _ in range(3))
    out = chunked_attention(q, k, v, mask=AttentionMask(causal=True), block_size=8)
    chex.assert_type(out, jnp.bfloat16)
    want = np_attention(
        q.astype(np.float32),
        k.astype(np.float32),
        v.astype(np.float32),
        np.tril(np.ones((20, 20), bool)),
        0.0,
        8**-0.5,
    )
    np.testing.assert_allclose(np.asarray(out, np.float32), want, atol=3e-2)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"block_size": 0}, "block_size"), ({"bias": np.zeros((1, 3, 6, 6), np.float32)}, "bias")],
)
def test_errors(kwargs, match):
    x = np.zeros((1, 6, 2, 4), np.float32)
    with pytest.raises(ValueError, match=match):
        chunked_attention(x, x, x, **kwargs)


# ------------------------------------------------------------------ memory: no T x T buffer

T_BIG, D_BIG = 8192, 64


def _array_sizes(hlo: str) -> list[int]:
    return [int(np.prod([int(d) for d in dims.split(",") if d])) for dims in re.findall(r"\[([\d,]*)\]", hlo)]


def _compiled(impl: str, grad: bool):
    x = jax.ShapeDtypeStruct((1, T_BIG, 1, D_BIG), jnp.float32)
    mask = AttentionMask(causal=True)

    def fwd(q, k, v):
        return attention(q, k, v, mask=mask, impl=impl, block_size=512)

    fn = jax.grad(lambda q, k, v: fwd(q, k, v).sum(), argnums=(0, 1, 2)) if grad else fwd
    return jax.jit(fn).lower(x, x, x).compile()


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_chunked_has_no_t_by_t_buffer_at_8192(grad):
    compiled = _compiled("chunked", grad)
    hlo = compiled.as_text()
    assert not re.search(rf"\b{T_BIG},{T_BIG}\b", hlo)
    assert max(_array_sizes(hlo)) <= T_BIG * D_BIG  # nothing larger than q itself
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp < T_BIG * T_BIG * 4 / 8, f"temp buffers {temp / 2**20:.1f} MiB"


def test_the_buffer_check_catches_xla():
    """Positive control: the same checks flag the materialised T x T logits of impl='xla'."""
    compiled = _compiled("xla", grad=False)
    assert re.search(rf"\b{T_BIG},{T_BIG}\b", compiled.as_text())
    assert compiled.memory_analysis().temp_size_in_bytes >= T_BIG * T_BIG * 4


def test_chunked_matches_xla_at_1024():
    T, D = 1024, 64
    rng = np.random.default_rng(3)
    q, k, v, w = (rng.standard_normal((1, T, 1, D)).astype(np.float32) for _ in range(4))
    mask = AttentionMask(causal=True)
    (_, out_c), g_c = _loss_fn("chunked", mask=mask, block_size=256)(q, k, v, None, w)
    (_, out_x), g_x = _loss_fn("xla", mask=mask)(q, k, v, None, w)
    np.testing.assert_allclose(out_c, out_x, atol=1e-5, rtol=1e-5)
    for name, a, b in zip(("dq", "dk", "dv"), g_x, g_c):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=name)
