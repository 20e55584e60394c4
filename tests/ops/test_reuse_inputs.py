"""What another project passes in: a plain boolean mask works, a float one and a wrong RoPE
positions shape get a message that says what to pass instead."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.attention import attention
from transformer_jax.ops.masks import AttentionMask, causal_mask
from transformer_jax.ops.rope import apply_rope

B, T, H, D = 2, 6, 2, 8


def _qkv():
    k = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(ki, (B, T, H, D)) for ki in k)


def test_a_boolean_array_mask_is_the_same_as_the_lazy_mask():
    q, k, v = _qkv()
    want = attention(q, k, v, mask=AttentionMask(causal=True))
    np.testing.assert_allclose(attention(q, k, v, mask=causal_mask(T)), want, atol=1e-6)
    np.testing.assert_allclose(attention(q, k, v, mask=causal_mask(T)[None, None], impl="chunked"), want, atol=1e-5)


def test_a_float_mask_is_refused_with_what_to_pass_instead():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"not ArrayImpl of float32; an additive float mask goes in bias="):
        attention(q, k, v, mask=jnp.where(causal_mask(T), 0.0, -1e9))


@pytest.mark.parametrize("shape", [(T,), (1, T), (B, T)])
def test_rope_takes_positions_per_token(shape):
    x = _qkv()[0]
    positions = jnp.broadcast_to(jnp.arange(T), shape)
    np.testing.assert_allclose(apply_rope(x, positions), apply_rope(x, jnp.arange(T)[None]), atol=1e-6)


@pytest.mark.parametrize("shape", [(T + 1,), (3, T), (B, T, 1), ()])
def test_rope_names_a_wrong_positions_shape(shape):
    x = _qkv()[0]
    with pytest.raises(ValueError, match=rf"positions_BT has shape {re_shape(shape)}; expected \[T\] or \[B\|1, T\]"):
        apply_rope(x, jnp.zeros(shape, jnp.int32))


def re_shape(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")
