"""ops.kv_cache: the stored layout round-trips, and attention read from it equals ops.attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.attention import attention
from transformer_jax.ops.kv_cache import cached_attention, init_kv_cache, kv_cache_of, update_kv_cache
from transformer_jax.ops.masks import AttentionMask


def _rand(key, *shape):
    return jax.random.normal(jax.random.key(key), shape)


def test_update_writes_slots_in_order_and_keys_values_round_trip():
    B, K, D, S = 2, 3, 4, 7
    cache = init_kv_cache(B, S, K, D)
    k1, v1, k2, v2 = _rand(1, B, 2, K, D), _rand(2, B, 2, K, D), _rand(3, B, 3, K, D), _rand(4, B, 3, K, D)
    cache = update_kv_cache(update_kv_cache(cache, k1, v1), k2, v2)
    assert int(cache.index) == 5 and cache.max_len == S and cache.k_BKDS.shape == (B, K, D, S)
    k, v = cache.keys_values()
    np.testing.assert_array_equal(k[:, :5], jnp.concatenate([k1, k2], axis=1))
    np.testing.assert_array_equal(v[:, :5], jnp.concatenate([v1, v2], axis=1))
    np.testing.assert_array_equal(k[:, 5:], 0.0)
    full = kv_cache_of(k1, v1)
    assert int(full.index) == 2 and np.array_equal(full.keys_values()[0], k1)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cached_attention_equals_attention_on_keys_values(heads, kv_heads, with_bias):
    B, T, S, D = 2, 3, 6, 8
    cache = kv_cache_of(_rand(1, B, S, kv_heads, D), _rand(2, B, S, kv_heads, D))
    q = _rand(3, B, T, heads, D)
    # queries at positions 2..4 see slots <= their position; batch row 1 has a padded slot 0
    mask = AttentionMask(
        causal=True,
        q_positions=jnp.broadcast_to(jnp.arange(2, 5), (B, T)),
        kv_positions=jnp.broadcast_to(jnp.arange(S), (B, S)),
        kv_valid=jnp.array([[True] * S, [False] + [True] * (S - 1)]),
    )
    bias = _rand(4, 1, heads, T, S) if with_bias else None
    k, v = cache.keys_values()
    want = attention(q, k, v, mask=mask, bias=bias, scale=0.3)
    got = cached_attention(q, cache, mask_BHTS=mask.materialize(T, S), bias_BHTS=bias, scale=0.3)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_cached_attention_query_that_sees_nothing_gets_zero():
    B, T, S, H, D = 1, 2, 4, 2, 4
    cache = kv_cache_of(_rand(1, B, S, H, D), _rand(2, B, S, H, D))
    mask = jnp.array([[True, True, False, False], [False] * 4])[None, None]
    out = cached_attention(_rand(3, B, T, H, D), cache, mask_BHTS=mask)
    np.testing.assert_array_equal(out[:, 1], 0.0)
    assert np.all(np.abs(np.asarray(out[:, 0])) > 0)
