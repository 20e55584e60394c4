"""Mask builders and AttentionMask at their edges: the defaults (q_offset 0, causal windows), dense
masks given with fewer than 4 dims or refused with more, and blocks at non-zero offsets of every
kind of mask array, against loops written here."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.masks import AttentionMask, causal_mask, combine_masks, sliding_window_mask


def _loop(shape, fn):
    out = np.zeros(shape, bool)
    for idx in np.ndindex(*shape):
        out[idx] = fn(*idx)
    return out


def test_causal_mask_defaults_to_queries_starting_at_position_0():
    """Without q_offset, query i sees keys 0..i, whether or not kv_len is given."""
    np.testing.assert_array_equal(causal_mask(4), _loop((4, 4), lambda i, j: j <= i))
    np.testing.assert_array_equal(causal_mask(3, 5), _loop((3, 5), lambda i, j: j <= i))


def test_sliding_window_mask_is_causal_by_default():
    """Without `causal`, the window looks back only: 0 <= q_pos - kv_pos < window."""
    qp, kp = jnp.arange(6), jnp.arange(6)
    np.testing.assert_array_equal(sliding_window_mask(qp, kp, 2), _loop((6, 6), lambda t, s: 0 <= t - s < 2))


@pytest.mark.parametrize("shape", [(5, 7), (2, 5, 7), (1, 2, 5, 7)])
def test_dense_masks_of_two_to_four_dims_broadcast_from_the_left(shape):
    """A dense [T, S] / [H, T, S] mask is [1, 1, T, S] / [1, H, T, S], in materialize and block."""
    dense = np.random.default_rng(0).random(shape) < 0.6
    m = AttentionMask(dense=jnp.asarray(dense))
    want = dense.reshape((1,) * (4 - dense.ndim) + shape)
    got, block = jax.jit(lambda m: (m.materialize(5, 7), m.block(1, 3, 2, 4)))(m)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(block, want[:, :, 1:4, 2:6])


def test_dense_mask_with_five_dims_is_refused():
    """A dense mask has at most 4 dims [B|1, H|1, T, S]; a fifth is an error that says so."""
    m = AttentionMask(dense=jnp.ones((1, 1, 1, 4, 4), bool))
    with pytest.raises(ValueError) as err:
        m.materialize(4, 4)
    assert str(err.value) == "dense mask has shape (1, 1, 1, 4, 4); expected at most 4 dims [B|1, H|1, T, S]"


def _reference(q_pos, kv_pos, q_seg, kv_seg, kv_valid, dense, causal, window):
    """[B, H, T, S] visibility by loops, from the AttentionMask docstring."""
    B, H, T, S = dense.shape

    def vis(b, h, t, s):
        d = q_pos[b, t] - kv_pos[b, s]
        ok = q_seg[b, t] == kv_seg[b, s] and kv_valid[b, s] and dense[b, h, t, s]
        if causal:
            ok = ok and d >= 0
        if window is not None:
            ok = ok and (d < window if causal else abs(d) < window)
        return ok

    return _loop((B, H, T, S), vis)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _blocks(m, tq, tk, n_q, n_k):
    """m.block at every (q_start, kv_start) in range(n_q) x range(n_k), starts traced."""
    per_k = jax.vmap(lambda q0, k0: m.block(q0, tq, k0, tk), in_axes=(None, 0))
    return jax.vmap(per_k, in_axes=(0, None))(jnp.arange(n_q), jnp.arange(n_k))


@pytest.mark.parametrize("causal,window", [(True, 3), (False, 2)])
@pytest.mark.parametrize("row_broadcast", [False, True])
def test_blocks_at_every_offset_with_every_array(causal, window, row_broadcast):
    """Positions, segment ids, kv_valid and a dense mask (per row, or broadcast over rows): each
    (2, 3) block at each offset equals the loop reference's slice."""
    B, H, T, S, tq, tk = 2, 2, 5, 6, 2, 3
    rng = np.random.default_rng(1)
    q_pos = np.sort(rng.integers(0, 8, (B, T)), 1)
    kv_pos = np.sort(rng.integers(0, 8, (B, S)), 1)
    q_seg, kv_seg = np.sort(rng.integers(0, 2, (B, T)), 1), np.sort(rng.integers(0, 2, (B, S)), 1)
    kv_valid = rng.random((B, S)) < 0.8
    dense = rng.random((1, H, 1 if row_broadcast else T, S)) < 0.7
    arrays = dict(q_positions=q_pos, kv_positions=kv_pos, q_segment_ids=q_seg, kv_segment_ids=kv_seg)
    m = AttentionMask(
        causal=causal,
        window=window,
        kv_valid=jnp.asarray(kv_valid),
        dense=jnp.asarray(dense),
        **{k: jnp.asarray(v) for k, v in arrays.items()},
    )
    full = _reference(q_pos, kv_pos, q_seg, kv_seg, kv_valid, np.broadcast_to(dense, (B, H, T, S)), causal, window)
    blocks = np.asarray(_blocks(m, tq, tk, T - tq + 1, S - tk + 1))
    for q0, k0 in np.ndindex(T - tq + 1, S - tk + 1):
        got = np.broadcast_to(blocks[q0, k0], (B, H, tq, tk))
        np.testing.assert_array_equal(got, full[:, :, q0 : q0 + tq, k0 : k0 + tk], err_msg=f"block at {q0}, {k0}")


def test_a_mask_without_arrays_is_one_broadcast_row():
    """No condition: every key is visible, as a [1, 1, T, S] mask (batch and heads broadcast)."""
    got = AttentionMask().materialize(3, 4)
    assert got.shape == (1, 1, 3, 4) and bool(got.all())


ARRAY_LENGTHS = {
    "q_positions": "q_len",
    "kv_positions": "kv_len",
    "q_segment_ids": "q_len",
    "kv_segment_ids": "kv_len",
    "kv_valid": "kv_len",
}


@pytest.mark.parametrize("name", list(ARRAY_LENGTHS))
def test_validate_accepts_one_dim_arrays_of_any_batch(name):
    """A [T] / [S] array (no batch axis) fits whatever the batch, and behaves as its [1, T] / [1, S] form."""
    T = S = n = 4  # one segment-id array means self-attention: T == S
    arr = np.arange(n) % 2 if "segment" in name else (np.arange(n) < n - 1 if name == "kv_valid" else np.arange(n))
    one_dim = dataclasses.replace(AttentionMask(causal=True), **{name: jnp.asarray(arr)})
    two_dim = dataclasses.replace(AttentionMask(causal=True), **{name: jnp.asarray(arr)[None]})
    one_dim.validate(T, S, batch=4, num_heads=2)
    np.testing.assert_array_equal(*jax.jit(lambda a, b: (a.materialize(T, S), b.materialize(T, S)))(one_dim, two_dim))


@pytest.mark.parametrize("name", list(ARRAY_LENGTHS))
@pytest.mark.parametrize("bad", ["length", "batch", "ndim"])
def test_validate_names_the_misshapen_array(name, bad):
    """A wrong length, a batch other than 1 or B, or a third axis is refused, naming the field."""
    T, S, B = 3, 5, 2
    n = T if ARRAY_LENGTHS[name] == "q_len" else S
    shape = {"length": (B, n + 1), "batch": (B + 1, n), "ndim": (B, 1, n)}[bad]
    m = dataclasses.replace(AttentionMask(), **{name: jnp.zeros(shape, bool if name == "kv_valid" else jnp.int32)})
    with pytest.raises(ValueError) as err:
        m.validate(T, S, batch=B)
    assert str(err.value) == (
        f"AttentionMask.{name} has shape {shape}; expected [B|1, {n}] (batch={B}, q_len={T}, kv_len={S})"
    )


def test_validate_gives_the_dense_shape_and_the_wanted_one():
    """A dense mask that does not broadcast to [B, H, T, S] is refused with both shapes."""
    m = AttentionMask(dense=jnp.ones((1, 3, 4, 4), bool))
    with pytest.raises(ValueError) as err:
        m.validate(4, 4, batch=2, num_heads=2)
    assert str(err.value) == (
        "AttentionMask.dense has shape (1, 3, 4, 4); expected one broadcastable to [B|1, H|1, T, S] = (2, 2, 4, 4)"
    )


@pytest.mark.parametrize("given", ["q_segment_ids", "kv_segment_ids"])
@pytest.mark.parametrize("ndim", [1, 2])
def test_one_sided_segment_ids_need_equal_lengths(given, ndim):
    """Segment ids on one side only mean self-attention; validate() alone refuses T != S, naming the
    given side and both lengths."""
    seg = jnp.zeros((5,) if ndim == 1 else (1, 5), jnp.int32)
    q_len, kv_len = (5, 4) if given == "q_segment_ids" else (4, 5)
    with pytest.raises(ValueError) as err:
        dataclasses.replace(AttentionMask(), **{given: seg}).validate(q_len, kv_len)
    assert str(err.value) == (
        f"only AttentionMask.{given} (length 5) was given, which means self-attention, but the other side "
        "has length 4; pass both q_segment_ids and kv_segment_ids for cross-attention"
    )


def test_combine_masks_gives_booleans_even_for_one_integer_mask():
    """A single 0/1 (or any integer) mask comes back as a boolean mask, like the AND of several."""
    got = combine_masks(jnp.array([[1, 0, 2]]), None)
    assert got is not None and got.dtype == jnp.bool_
    np.testing.assert_array_equal(got, [[True, False, True]])
