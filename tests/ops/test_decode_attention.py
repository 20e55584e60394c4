"""ops.decode_attention: every DECODE_IMPLS entry against a numpy loop over the written, visible
slots (GQA, windows, bias, padding, several queries, caches that are not a multiple of the block),
the blocked loop's claim to read only the written prefix (unwritten slots poisoned with NaN), the
flash-decoding kernel in interpret mode with per-row ranges, and `auto`'s choice per backend."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import decode_attention as dec
from transformer_jax.ops.kv_cache import KVCache, init_kv_cache, update_kv_cache
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.pallas_decode import flash_decode_attention


def _reference(q_BTHD, k_BSKD, v_BSKD, visible_BTS, bias_BHTS=None):
    """softmax over the visible slots, written as loops over batch, head, query."""
    B, T, H, D = q_BTHD.shape
    K = k_BSKD.shape[2]
    out = np.zeros((B, T, H, D))
    for b in range(B):
        for h in range(H):
            kh = h // (H // K)
            for t in range(T):
                seen = np.flatnonzero(visible_BTS[b, t])
                if not len(seen):
                    continue
                s = q_BTHD[b, t, h] @ k_BSKD[b, seen, kh].T / np.sqrt(D)
                if bias_BHTS is not None:
                    s = s + bias_BHTS[b, h, t, seen]
                p = np.exp(s - s.max())
                out[b, t, h] = (p / p.sum()) @ v_BSKD[b, seen, kh]
    return out


def _cache(B, S, K, D, written, seed=0, poison=None):
    rng = np.random.default_rng(seed)
    k, v = (rng.standard_normal((B, written, K, D)).astype(np.float32) for _ in range(2))
    cache = update_kv_cache(init_kv_cache(B, S, K, D), jnp.asarray(k), jnp.asarray(v))
    if poison is not None:  # slots from `poison` on hold NaN: an implementation that reads them returns NaN
        nan = jnp.arange(S) >= poison
        cache = KVCache(jnp.where(nan, jnp.nan, cache.k_BKDS), jnp.where(nan, jnp.nan, cache.v_BKDS), cache.index)
    return cache, k, v


def _decode_mask(B, T, written, window=None, kv_valid=None):
    """The mask DecoderLM builds for T new tokens at the end of `written` cache slots."""
    q_pos = jnp.broadcast_to(written - T + jnp.arange(T), (B, T))
    return AttentionMask(causal=True, window=window, q_positions=q_pos, kv_valid=kv_valid)


def _visible(B, T, S, written, window=None, kv_valid=None):
    q_pos = written - T + np.arange(T)
    s = np.arange(S)
    vis = (s[None, :] <= q_pos[:, None]) & (s[None, :] < written)
    if window is not None:
        vis &= q_pos[:, None] - s[None, :] < window
    vis = np.broadcast_to(vis, (B, T, S)).copy()
    if kv_valid is not None:
        vis &= np.asarray(kv_valid)[:, None, :]
    return vis


CASES = {
    # name: (B, T, S, H, K, D, written, window, block)
    "one_token_gqa": (2, 1, 64, 4, 2, 8, 37, None, 16),
    "block_boundary": (1, 1, 64, 2, 2, 8, 32, None, 16),
    "S_not_multiple_of_block": (2, 1, 50, 4, 1, 8, 45, None, 16),
    "window_skips_blocks": (2, 1, 96, 4, 2, 8, 90, 20, 16),
    "prefill_several_queries": (2, 5, 40, 2, 2, 4, 12, None, 8),
    "block_wider_than_cache": (1, 1, 24, 2, 1, 8, 7, None, 256),
}


@pytest.mark.parametrize("impl", ["dense", "blocked"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_a_loop_over_the_visible_slots(impl, case):
    B, T, S, H, K, D, written, window, block = CASES[case]
    cache, k, v = _cache(B, S, K, D, written)
    q = np.random.default_rng(1).standard_normal((B, T, H, D)).astype(np.float32)
    mask = _decode_mask(B, T, written, window)
    out = dec.decode_attention(jnp.asarray(q), cache, mask=mask, impl=impl, block_size=block)
    kpad = np.zeros((B, S, K, D), np.float32)
    vpad = np.zeros((B, S, K, D), np.float32)
    kpad[:, :written], vpad[:, :written] = k, v
    want = _reference(q, kpad, vpad, _visible(B, T, S, written, window))
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("window", [None, 20])
def test_blocked_reads_only_the_written_prefix(window):
    """Every slot outside the blocks that hold a visible slot holds NaN: the unwritten blocks (from
    the block after the one holding slot index - 1 on) and, under a window, the blocks wholly before
    it. Blocked never reads them; dense reads every slot, so its output is NaN (the poison works)."""
    B, T, S, H, K, D, written, block = 2, 1, 128, 4, 2, 8, 70, 16
    cache, k, v = _cache(B, S, K, D, written)
    query = written - 1
    first = 0 if window is None else (query - window + 1) // block * block  # 48 under the window
    end = -(-written // block) * block  # 80
    outside = (jnp.arange(S) < first) | (jnp.arange(S) >= end)
    cache = KVCache(jnp.where(outside, jnp.nan, cache.k_BKDS), jnp.where(outside, jnp.nan, cache.v_BKDS), cache.index)
    q = jnp.asarray(np.random.default_rng(2).standard_normal((B, T, H, D)), jnp.float32)
    mask = _decode_mask(B, T, written, window)
    out = dec.decode_attention(q, cache, mask=mask, impl="blocked", block_size=block)
    assert np.isfinite(np.asarray(out)).all()
    assert not np.isfinite(np.asarray(dec.decode_attention(q, cache, mask=mask, impl="dense"))).all()


def test_bias_and_key_padding():
    """ALiBi-style bias [B, H, T, S] and a padded row (kv_valid) through both implementations."""
    B, T, S, H, K, D, written = 2, 2, 48, 4, 2, 8, 30
    cache, k, v = _cache(B, S, K, D, written, seed=4)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((B, T, H, D)).astype(np.float32)
    bias = rng.standard_normal((B, H, T, S)).astype(np.float32)
    kv_valid = np.ones((B, S), bool)
    kv_valid[1, 3:9] = False
    mask = _decode_mask(B, T, written, kv_valid=jnp.asarray(kv_valid))
    kpad = np.zeros((B, S, K, D), np.float32)
    vpad = np.zeros((B, S, K, D), np.float32)
    kpad[:, :written], vpad[:, :written] = k, v
    want = _reference(q, kpad, vpad, _visible(B, T, S, written, kv_valid=kv_valid), bias)
    for impl in ("dense", "blocked"):
        out = dec.decode_attention(
            jnp.asarray(q), cache, mask=mask, bias_BHTS=jnp.asarray(bias), impl=impl, block_size=16
        )
        np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5, err_msg=impl)


def test_blocked_under_jit_with_a_traced_index():
    """One compiled function serves every position (the loop bound is data, not shape)."""
    B, S, H, K, D = 1, 64, 2, 1, 8
    cache, _, _ = _cache(B, S, K, D, 64, seed=6)
    q = jnp.asarray(np.random.default_rng(7).standard_normal((B, 1, H, D)), jnp.float32)
    f = jax.jit(lambda c, m: dec.decode_attention(q, c, mask=m, impl="blocked", block_size=16))
    for written in (5, 33, 64):
        c = KVCache(cache.k_BKDS, cache.v_BKDS, jnp.asarray(written, jnp.int32))
        m = _decode_mask(B, 1, written)
        np.testing.assert_allclose(f(c, m), dec.decode_attention(q, c, mask=m, impl="dense"), atol=2e-5)


@pytest.mark.parametrize("window", [None, 12])
def test_flash_decode_kernel_in_interpret_mode_with_row_ranges(window):
    """The Triton kernel (Pallas interpreter) with the key range `kv_range` derives from the mask."""
    B, S, H, K, D, written = 2, 64, 4, 2, 8, 41
    cache, _, _ = _cache(B, S, K, D, written, seed=8)
    q = jnp.asarray(np.random.default_rng(9).standard_normal((B, 1, H, D)), jnp.float32)
    mask = _decode_mask(B, 1, written, window)
    assert not dec.pallas_decode_problems(mask, False, 1, S)
    out = flash_decode_attention(q, cache, interpret=True, **dec.kv_range(mask, cache))
    np.testing.assert_allclose(out, dec.decode_attention(q, cache, mask=mask, impl="dense"), atol=2e-5, rtol=2e-5)


def test_pallas_decode_refuses_what_it_cannot_take():
    cache = init_kv_cache(1, 64, 1, 8)
    q = jnp.zeros((1, 2, 2, 8))
    problems = dec.pallas_decode_problems(_decode_mask(1, 2, 8, kv_valid=jnp.ones((1, 64), bool)), True, 2, 64)
    assert problems == [
        "2 queries (it decodes one token)",
        "an additive bias (ALiBi / relative positions)",
        "mask.kv_valid",
    ]
    with pytest.raises(ValueError, match="cannot take 2 queries"):
        dec.decode_attention(q, cache, mask=_decode_mask(1, 2, 8), impl="pallas_gpu")
    with pytest.raises(ValueError, match="needs a GPU"):
        dec.decode_attention(q[:, :1], cache, mask=_decode_mask(1, 1, 8), impl="pallas_gpu")


def test_auto_resolves_per_backend_and_never_to_a_kernel_that_cannot_run():
    ok = _decode_mask(1, 1, 8)
    assert dec.resolve_decode_impl("cpu", ok, False, 1, 64) == "blocked"
    assert dec.resolve_decode_impl("gpu", ok, False, 1, 64) == "pallas_gpu"
    assert dec.resolve_decode_impl("gpu", ok, True, 1, 64) == "dense"
    assert dec.resolve_decode_impl("gpu", ok, False, 1, 40) == "dense"
    assert dec.resolve_decode_impl("tpu", ok, False, 1, 64) == "dense"


def test_auto_runs_the_impl_it_resolves_to(monkeypatch):
    """``auto`` runs DECODE_IMPLS[resolve_decode_impl(this backend, ...)] (the names it looks up are
    recorded) and gives that implementation's output bit for bit; on CPU that is blocked, which
    never reads the unwritten slots (poisoned with NaN here)."""
    B, S, H, K, D, written = 1, 64, 2, 1, 8, 20
    cache, _, _ = _cache(B, S, K, D, written, seed=10, poison=32)
    q = jnp.asarray(np.random.default_rng(11).standard_normal((B, 1, H, D)), jnp.float32)
    mask = _decode_mask(B, 1, written)
    resolved = dec.resolve_decode_impl(jax.default_backend(), mask, False, 1, S)
    looked_up = []
    get = dec.DECODE_IMPLS.get
    monkeypatch.setattr(dec.DECODE_IMPLS, "get", lambda name: looked_up.append(name) or get(name))
    out = dec.decode_attention(q, cache, mask=mask, impl="auto", block_size=16)
    assert looked_up == ["auto", resolved]
    want = dec.decode_attention(q, cache, mask=mask, impl=resolved, block_size=16)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    if jax.default_backend() == "cpu":
        assert resolved == "blocked" and np.isfinite(np.asarray(out)).all()
