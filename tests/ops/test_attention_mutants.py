"""attention() at its edges: half-precision outputs with fully masked rows, biases given with fewer
than 4 dims, the cuDNN refusal message on CPU, the static arguments of a causal window, and the
boundaries of `auto`'s choice (CHUNKED_MIN_LEN, head dim 128, a bias on GPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import attention as attention_mod
from transformer_jax.ops.attention import CHUNKED_MIN_LEN, attention, resolve_impl
from transformer_jax.ops.masks import AttentionMask


def _np_attention(q, k, v, bias, visible):
    """float64 softmax(Q K^T / sqrt(D) + bias, masked) V with K = H heads; rows with no visible key give 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1]) + bias
    logits = np.where(visible, logits, -np.inf)
    m = np.max(logits, -1, keepdims=True)
    p = np.exp(logits - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0), v)


def _qkv(dtype=jnp.float32, B=2, T=5, H=2, D=8, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.standard_normal((B, T, H, D)), dtype) for _ in range(3))
    return q, k, v


def test_bfloat16_with_fully_masked_rows_stays_bfloat16():
    """Zeroing the rows that see no key keeps the input dtype (bfloat16 in, bfloat16 out)."""
    q, k, v = _qkv(jnp.bfloat16)
    valid = jnp.array([[True] * 5, [False] * 5])  # batch 1: no visible key
    out = jax.jit(attention)(q, k, v, mask=AttentionMask(kv_valid=valid))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[1], np.float32), 0.0)
    q32, k32, v32 = (np.asarray(x, np.float32) for x in (q, k, v))
    ref = _np_attention(q32, k32, v32, 0.0, np.ones((1, 1, 5, 5), bool))
    np.testing.assert_allclose(np.asarray(out[0], np.float32), ref[0], atol=2e-2)


@pytest.mark.parametrize("shape", [(5, 5), (2, 5, 5), (1, 2, 5, 5)])
def test_bias_of_two_to_four_dims_broadcasts_from_the_left(shape):
    """A [T, S] / [H, T, S] bias is a [1, 1, T, S] / [1, H, T, S] one."""
    q, k, v = _qkv(seed=1)
    bias = jnp.asarray(np.random.default_rng(2).standard_normal(shape), jnp.float32)
    out = jax.jit(attention)(q, k, v, bias=bias)
    ref = _np_attention(q, k, v, np.asarray(bias).reshape((1,) * (4 - len(shape)) + shape), np.ones((1, 1, 5, 5), bool))
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_cudnn_on_cpu_names_the_device_it_needs():
    """impl='cudnn' without a GPU is refused, naming GPU, the backend there is, and the alternatives."""
    if jax.default_backend() == "gpu":
        pytest.skip("runs without a GPU only")
    q, k, v = _qkv()
    with pytest.raises(ValueError) as err:
        attention(q, k, v, impl="cudnn")
    assert str(err.value) == (
        f"impl='cudnn' needs a GPU, but the program is compiled for {jax.default_backend()!r}; "
        "use impl='auto', impl='xla' or impl='chunked'"
    )


def test_a_causal_window_is_given_to_cudnn_as_causal():
    """cuDNN bounds a sliding window on the right only through its causal mask (jax: "CuDNN supports
    only the left window ... when causal mask is enabled"), so a causal window of w keys is
    is_causal=True with local_window_size (w - 1, 0)."""
    kw = attention_mod._static_dpa_kwargs(AttentionMask(causal=True, window=3), 8, 8)
    assert kw == {"is_causal": True, "local_window_size": (2, 0)}


def test_auto_boundaries():
    """`auto` takes chunked from S = CHUNKED_MIN_LEN on (CPU); cuDNN up to head dim 128 included; and
    on GPU a bias rules out pallas_gpu, leaving xla."""
    causal = AttentionMask(causal=True)
    T = CHUNKED_MIN_LEN
    assert resolve_impl("cpu", (1, 4, 2, 8), (1, T, 2, 8)) == "chunked"
    assert resolve_impl("cpu", (1, 4, 2, 8), (1, T - 1, 2, 8)) == "xla"
    shape = (2, 256, 4, 128)
    assert resolve_impl("gpu", shape, shape, mask=causal, dtype=jnp.bfloat16) == "cudnn"
    shape64 = (2, 256, 4, 64)
    assert resolve_impl("gpu", shape64, shape64, mask=causal) == "pallas_gpu"  # float32: not cuDNN
    bias = jnp.zeros((1, 1, 256, 256))
    assert resolve_impl("gpu", shape64, shape64, mask=causal, bias=bias) == "xla"


@pytest.fixture
def recorded_dpa(monkeypatch):
    """jax.nn.dot_product_attention recording the arguments it gets, then run by jax's xla path; and a
    backend that reads as GPU, so impl='cudnn' gets as far as its call on CPU."""
    real, calls = jax.nn.dot_product_attention, []

    def recording(q, k, v, *, implementation=None, **kwargs):
        calls.append(dict(kwargs, implementation=implementation))
        return real(q, k, v, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", recording)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    return calls


_attend = jax.jit(attention, static_argnames=("impl", "scale", "block_size"))  # one compilation per call site


def _scaled_reference(q, k, v, bias, visible, scale):
    return _np_attention(np.asarray(q) * scale * np.sqrt(q.shape[-1]), k, v, bias, visible)


def test_cudnn_gets_a_static_mask_as_arguments_bias_and_scale(recorded_dpa):
    """A causal window on T == S reaches cuDNN as is_causal / local_window_size (no T x S mask), with
    the bias and the scale, and computes the masked attention."""
    q, k, v = _qkv(T=6, seed=3)
    bias = jnp.asarray(np.random.default_rng(4).standard_normal((6, 6)), jnp.float32)
    out = _attend(q, k, v, mask=AttentionMask(causal=True, window=3), bias=bias, scale=0.3, impl="cudnn")
    (call,) = recorded_dpa
    assert call["implementation"] == "cudnn" and call.get("mask") is None
    assert (call["is_causal"], call["local_window_size"], call["scale"]) == (True, (2, 0), 0.3)
    t = np.arange(6)
    visible = (t[None, :] <= t[:, None]) & (t[:, None] - t[None, :] < 3)
    np.testing.assert_allclose(out, _scaled_reference(q, k, v, bias, visible, 0.3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["cudnn", "xla"])
def test_masks_with_arrays_reach_the_kernel_materialised(recorded_dpa, impl):
    """A mask with arrays (and any mask for impl='xla') is passed as the dense T x S mask to the
    requested implementation; rows that see no key come out 0."""
    q, k, v = _qkv(T=6, seed=5)
    valid = np.array([[True] * 4 + [False] * 2, [False] * 6])
    mask = AttentionMask(causal=impl == "xla", kv_valid=jnp.asarray(valid))
    out = _attend(q, k, v, mask=mask, impl=impl)
    (call,) = recorded_dpa
    assert call["implementation"] == impl and "is_causal" not in call and call["mask"].shape == (2, 1, 6, 6)
    t = np.arange(6)
    visible = valid[:, None, None, :] & ((t[None, :] <= t[:, None]) if impl == "xla" else True)
    np.testing.assert_allclose(out, _np_attention(q, k, v, 0.0, visible), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(out[1], 0.0)


def test_xla_gets_the_materialised_mask_of_a_static_one(recorded_dpa):
    """impl='xla' runs on the materialised mask even when the mask is static (causal only)."""
    q, k, v = _qkv(T=6, seed=6)
    out = _attend(q, k, v, mask=AttentionMask(causal=True), impl="xla")
    (call,) = recorded_dpa
    assert call["implementation"] == "xla" and "is_causal" not in call and call["mask"] is not None
    t = np.arange(6)
    np.testing.assert_allclose(out, _np_attention(q, k, v, 0.0, t[None, :] <= t[:, None]), atol=1e-5, rtol=1e-5)


def test_block_size_reaches_the_blockwise_implementation(monkeypatch):
    """block_size (default 512) is the tile size chunked attention is called with."""
    real, sizes = attention_mod.chunked_attention, []

    def recording(*args, block_size, **kwargs):
        sizes.append(block_size)
        return real(*args, block_size=block_size, **kwargs)

    monkeypatch.setattr(attention_mod, "chunked_attention", recording)
    q, k, v = _qkv(T=8, seed=7)
    mask = AttentionMask(causal=True)
    small, default = _attend(q, k, v, mask=mask, impl="chunked", block_size=4), _attend(q, k, v, impl="chunked")
    assert sizes == [4, 512]
    t = np.arange(8)
    np.testing.assert_allclose(small, _np_attention(q, k, v, 0.0, t[None, :] <= t[:, None]), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(default, _np_attention(q, k, v, 0.0, np.ones((8, 8), bool)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "mask,message",
    [
        (
            AttentionMask(kv_valid=jnp.ones((3, 4), bool)),
            "AttentionMask.kv_valid has shape (3, 4); expected [B|1, 4] (batch=2, q_len=4, kv_len=4)",
        ),
        (
            AttentionMask(dense=jnp.ones((1, 3, 4, 4), bool)),
            "AttentionMask.dense has shape (1, 3, 4, 4); expected one broadcastable to [B|1, H|1, T, S] = (2, 2, 4, 4)",
        ),
    ],
)
def test_masks_are_checked_against_the_batch_and_heads_of_the_inputs(mask, message):
    """attention() validates the mask against q's batch and head counts, not only the lengths."""
    q, k, v = _qkv(T=4)
    with pytest.raises(ValueError) as err:
        attention(q, k, v, mask=mask)
    assert str(err.value) == message
