"""Mask builders and the lazy AttentionMask against brute-force Python loops."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_jax.ops.masks import (
    AttentionMask,
    causal_mask,
    combine_masks,
    padding_mask_from_ids,
    padding_mask_from_lengths,
    segment_mask,
    sliding_window_mask,
)


def _loop(shape, fn):
    out = np.zeros(shape, bool)
    for idx in np.ndindex(*shape):
        out[idx] = fn(*idx)
    return out


def _visible_ref(m: AttentionMask, B: int, H: int, T: int, S: int) -> np.ndarray:
    """Brute-force [B, H, T, S] visibility straight from the AttentionMask docstring."""

    def get(x, b, i, default):
        if x is None:
            return default
        x = np.atleast_2d(np.asarray(x))
        return x[min(b, x.shape[0] - 1), i]

    q_seg = m.q_segment_ids if m.q_segment_ids is not None else m.kv_segment_ids
    kv_seg = m.kv_segment_ids if m.kv_segment_ids is not None else m.q_segment_ids
    dense = None if m.dense is None else np.asarray(m.dense).reshape((1,) * (4 - np.ndim(m.dense)) + np.shape(m.dense))

    def vis(b, h, t, s):
        qp, kp = get(m.q_positions, b, t, t), get(m.kv_positions, b, s, s)
        ok = True
        if m.causal:
            ok &= kp <= qp
        if m.window is not None:
            ok &= (qp - kp < m.window) and (m.causal or kp - qp < m.window)
        if q_seg is not None:
            ok &= get(q_seg, b, t, None) == get(kv_seg, b, s, None)
        ok &= bool(get(m.kv_valid, b, s, True))
        if dense is not None:
            ok &= bool(dense[tuple(min(i, n - 1) for i, n in zip((b, h, t, s), dense.shape))])
        return ok

    return _loop((B, H, T, S), vis)


def _full_mask(rng, B, H, T, S, causal, window, features):
    """An AttentionMask with the chosen optional arrays filled at random."""
    kw = {}
    if "positions" in features:
        kw["q_positions"] = np.sort(rng.integers(0, T + S, (B, T)), axis=1)
        kw["kv_positions"] = np.sort(rng.integers(0, T + S, (B, S)), axis=1)
    if "segments" in features:
        kw["q_segment_ids"] = np.sort(rng.integers(0, 3, (B, T)), axis=1)
        kw["kv_segment_ids"] = np.sort(rng.integers(0, 3, (B, S)), axis=1)
    if "kv_valid" in features:
        kw["kv_valid"] = rng.random((B, S)) < 0.8
    if "dense" in features:
        kw["dense"] = rng.random((1, H, 1 if "row_bcast" in features else T, S)) < 0.8
    return AttentionMask(causal=causal, window=window, **{k: jnp.asarray(v) for k, v in kw.items()})


class TestBuilders:
    @pytest.mark.parametrize("q_len,kv_len,off", [(4, None, 0), (3, 7, 4), (5, 2, 0), (3, 3, -1)])
    def test_causal(self, q_len, kv_len, off):
        S = q_len if kv_len is None else kv_len
        got = causal_mask(q_len, kv_len, q_offset=off)
        np.testing.assert_array_equal(got, _loop((q_len, S), lambda i, j: j <= i + off))

    def test_padding_from_lengths_and_ids(self):
        lengths = np.array([0, 3, 5])
        np.testing.assert_array_equal(padding_mask_from_lengths(lengths, 5), _loop((3, 5), lambda b, s: s < lengths[b]))
        ids = np.array([[5, 0, 2, 0], [0, 0, 1, 1]])
        np.testing.assert_array_equal(padding_mask_from_ids(ids, 0), _loop(ids.shape, lambda b, s: ids[b, s] != 0))

    def test_segment(self):
        q = np.array([[1, 1, 2, 0], [1, 2, 2, 2]])
        kv = np.array([[1, 2, 2], [0, 1, 1]])
        np.testing.assert_array_equal(segment_mask(q, kv), _loop((2, 4, 3), lambda b, t, s: q[b, t] == kv[b, s]))

    @pytest.mark.parametrize("causal", [True, False])
    @pytest.mark.parametrize("window", [1, 3])
    def test_sliding_window(self, causal, window):
        qp, kp = np.array([0, 2, 3, 7, 8]), np.arange(9)

        def ref(t, s):
            d = qp[t] - kp[s]
            return (0 <= d < window) if causal else abs(d) < window

        got = sliding_window_mask(qp, kp, window, causal=causal)
        np.testing.assert_array_equal(got, _loop((5, 9), ref))

    def test_combine(self):
        a = np.array([[True, False, True]])
        b = np.array([[True], [False]])
        np.testing.assert_array_equal(combine_masks(a, None, b), a & b)
        assert combine_masks(None, None) is None

    @pytest.mark.parametrize("window", [0, -2, 1.5])
    def test_bad_window(self, window):
        with pytest.raises(ValueError, match="window"):
            sliding_window_mask(np.arange(3), np.arange(3), window)
        with pytest.raises(ValueError, match="window"):
            AttentionMask().with_window(window)


class TestAttentionMask:
    @pytest.mark.parametrize(
        "causal,window,features",
        [
            (False, None, ()),
            (True, None, ()),
            (False, 2, ()),
            (True, 3, ("positions",)),
            (False, None, ("segments", "kv_valid")),
            (True, 4, ("positions", "segments", "kv_valid", "dense")),
            (False, None, ("dense", "row_bcast")),
        ],
    )
    def test_materialize_matches_loop(self, causal, window, features):
        B, H, T, S = 2, 2, 5, 7
        m = _full_mask(np.random.default_rng(0), B, H, T, S, causal, window, features)
        got = m.materialize(T, S)
        assert got.ndim == 4 and got.shape[2:] == (T, S) and got.dtype == jnp.bool_
        np.testing.assert_array_equal(np.broadcast_to(got, (B, H, T, S)), _visible_ref(m, B, H, T, S))

    def test_single_segment_ids_mean_self_attention(self):
        seg = jnp.array([[0, 0, 1, 1, 1]])
        for m in (AttentionMask(q_segment_ids=seg), AttentionMask(kv_segment_ids=seg)):
            np.testing.assert_array_equal(m.materialize(5, 5)[0, 0], segment_mask(seg, seg)[0])
        with pytest.raises(ValueError, match="kv_segment_ids"):
            AttentionMask(q_segment_ids=seg).materialize(5, 4)

    def test_validate_names_the_field(self):
        with pytest.raises(ValueError, match="kv_valid"):
            AttentionMask(kv_valid=jnp.ones((2, 3), bool)).validate(4, 4, batch=2)
        with pytest.raises(ValueError, match="dense"):
            AttentionMask(dense=jnp.ones((1, 3, 4, 4), bool)).validate(4, 4, batch=2, num_heads=2)

    def test_with_window_keeps_the_smaller(self):
        m = AttentionMask(causal=True).with_window(4)
        assert (m.causal, m.window) == (True, 4)
        assert m.with_window(2).window == 2 and m.with_window(9).window == 4

    def test_is_a_pytree_with_static_causal_and_window(self):
        m = AttentionMask(causal=True, window=3, kv_valid=jnp.ones((1, 4), bool))
        leaves, treedef = jax.tree_util.tree_flatten(m)
        assert len(leaves) == 1
        assert jax.tree_util.tree_unflatten(treedef, leaves).window == 3

        @jax.jit
        def f(mask, start):
            return mask.block(start, 2, 0, 4)

        chex.assert_shape(f(m, 1), (1, 1, 2, 4))
        np.testing.assert_array_equal(f(m, 1), m.materialize(4, 4)[:, :, 1:3])


@settings(max_examples=8, deadline=None)
@given(
    st.integers(1, 2),
    st.integers(1, 8),
    st.integers(1, 8),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 5)),
    st.sets(st.sampled_from(["positions", "segments", "kv_valid", "dense", "row_bcast"])),
    st.integers(0, 2**16),
)
def test_block_equals_slice_of_materialize(B, T, S, causal, window, features, seed):
    """Every (tq, tk) block at every (traced) offset equals the slice of the dense mask."""
    H, rng = 2, np.random.default_rng(seed)
    m = _full_mask(rng, B, H, T, S, causal, window, features)
    tq, tk = int(rng.integers(1, T + 1)), int(rng.integers(1, S + 1))
    full, blocks = _all_blocks(m, T, S, tq, tk)
    for q0, k0 in np.ndindex(T - tq + 1, S - tk + 1):
        got = blocks[q0, k0]
        assert got.shape[2:] == (tq, tk)
        np.testing.assert_array_equal(*np.broadcast_arrays(got, full[:, :, q0 : q0 + tq, k0 : k0 + tk]))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _all_blocks(m, T, S, tq, tk):
    q0s, k0s = jnp.arange(T - tq + 1), jnp.arange(S - tk + 1)
    per_q = jax.vmap(lambda q0, k0: m.block(q0, tq, k0, tk), in_axes=(None, 0))
    return m.materialize(T, S), jax.vmap(per_q, in_axes=(0, None))(q0s, k0s)
