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


def _qkv(dtype=np.float32, B=2, T=5, H=2, D=8, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, T, H, D)).astype(dtype) for _ in range(3))


def test_bfloat16_with_fully_masked_rows_stays_bfloat16():
    """Zeroing the rows that see no key keeps the input dtype (bfloat16 in, bfloat16 out)."""
    q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in _qkv())
    valid = jnp.array([[True] * 5, [False] * 5])  # batch 1: no visible key
    out = jax.jit(attention)(q, k, v, mask=AttentionMask(kv_valid=valid))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[1], np.float32), 0.0)
    ref = _np_attention(*(np.asarray(x, np.float32) for x in (q, k, v)), 0.0, np.ones((1, 1, 5, 5), bool))
    np.testing.assert_allclose(np.asarray(out[0], np.float32), ref[0], atol=2e-2)


@pytest.mark.parametrize("shape", [(5, 5), (2, 5, 5), (1, 2, 5, 5)])
def test_bias_of_two_to_four_dims_broadcasts_from_the_left(shape):
    """A [T, S] / [H, T, S] bias is a [1, 1, T, S] / [1, H, T, S] one."""
    q, k, v = _qkv(seed=1)
    bias = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    out = jax.jit(attention)(q, k, v, bias=bias)
    ref = _np_attention(q, k, v, bias.reshape((1,) * (4 - len(shape)) + shape), np.ones((1, 1, 5, 5), bool))
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_cudnn_on_cpu_names_the_device_it_needs():
    """impl='cudnn' without a GPU is refused, naming GPU, the backend there is, and the alternatives."""
    if jax.default_backend() == "gpu":
        pytest.skip("runs without a GPU only")
    q, k, v = _qkv()
    with pytest.raises(ValueError) as err:
        attention(q, k, v, impl="cudnn")
    assert str(err.value) == (
        f"impl='cudnn' needs a GPU, but the default JAX backend is {jax.default_backend()!r}; "
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
