"""Attention masks: plain boolean builders and a lazy `AttentionMask` (True = key is visible).

Shapes: T query length, S key length, B batch, H heads. The lazy mask keeps only the 1-D/2-D
pieces (positions, segment ids, key padding) plus an optional dense extra, so blockwise kernels
can build one (tq, tk) tile at a time with `AttentionMask.block` instead of the full T x S mask.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int


def causal_mask(q_len: int, kv_len: int | None = None, *, q_offset: int = 0) -> Bool[Array, "T S"]:
    """mask[i, j] = j <= i + q_offset; q_offset is the position of the first query (e.g. S - T
    when T new queries follow a cache of S - T keys). kv_len defaults to q_len."""
    kv_len = q_len if kv_len is None else kv_len
    return jnp.arange(kv_len)[None, :] <= jnp.arange(q_len)[:, None] + q_offset


def padding_mask_from_lengths(lengths_B: Int[Array, " B"], max_len: int) -> Bool[Array, "B S"]:
    """mask[b, s] = s < lengths[b] (the first lengths[b] tokens are real, the rest padding)."""
    return jnp.arange(max_len)[None, :] < jnp.asarray(lengths_B)[:, None]


def padding_mask_from_ids(ids_BS: Int[Array, "B S"], pad_id: int) -> Bool[Array, "B S"]:
    """mask[b, s] = ids[b, s] != pad_id."""
    return jnp.asarray(ids_BS) != pad_id


def segment_mask(q_segment_ids_BT: Int[Array, "B T"], kv_segment_ids_BS: Int[Array, "B S"]) -> Bool[Array, "B T S"]:
    """mask[b, t, s] = q_seg[b, t] == kv_seg[b, s] (packed sequences attend only within their
    segment; mask padding separately, e.g. with `kv_valid`)."""
    return jnp.asarray(q_segment_ids_BT)[..., :, None] == jnp.asarray(kv_segment_ids_BS)[..., None, :]


def sliding_window_mask(
    q_positions: Int[Array, "... T"],
    kv_positions: Int[Array, "... S"],
    window: int,
    *,
    causal: bool = True,
) -> Bool[Array, "... T S"]:
    """Local attention: with d = q_pos - kv_pos, visible iff 0 <= d < window (causal) or
    |d| < window (not causal). window counts the query itself, so window=1 sees only itself."""
    _check_window(window)
    d = jnp.asarray(q_positions)[..., :, None] - jnp.asarray(kv_positions)[..., None, :]
    return ((d >= 0) & (d < window)) if causal else (jnp.abs(d) < window)


def combine_masks(*masks: Bool[Array, ...] | None) -> Bool[Array, ...] | None:
    """Logical AND of the given masks with broadcasting; None entries are skipped (all None ->
    None)."""
    present = [jnp.asarray(m, dtype=bool) for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = jnp.logical_and(out, m)
    return out


def _check_window(window) -> None:
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window={window!r} must be a positive int (the number of visible positions)")


def _as_2d(x: Array | None) -> Array | None:
    return None if x is None else jnp.atleast_2d(jnp.asarray(x))


def _as_4d(x: Array) -> Array:
    x = jnp.asarray(x)
    if x.ndim > 4:
        raise ValueError(f"dense mask has shape {x.shape}; expected at most 4 dims [B|1, H|1, T, S]")
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def _slice_last(x: Array, start, size: int, axis: int) -> Array:
    """dynamic_slice along `axis` unless that dim is 1 (broadcast), which is kept as is."""
    if x.shape[axis] == 1:
        return x
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=axis)


def as_mask(mask: AttentionMask | Array | None) -> AttentionMask | None:
    """``mask`` as an `AttentionMask`: a boolean array (True = visible, broadcastable to
    [B|1, H|1, T, S], e.g. ``causal_mask(T)``) becomes its ``dense`` part."""
    if mask is None or isinstance(mask, AttentionMask):
        return mask
    dtype = getattr(mask, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jnp.bool_):
        return AttentionMask(dense=mask)
    raise TypeError(
        f"mask must be an AttentionMask or a boolean array (True = visible), not {type(mask).__name__}"
        + (f" of {dtype}" if dtype is not None else "")
        + "; an additive float mask goes in bias=..., and AttentionMask(causal=True) is causal without a T x S array"
    )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AttentionMask:
    """A lazy description of which keys each query may see. True = visible.

    A key is visible iff every given condition holds: causal (kv_pos <= q_pos), window
    (q_pos - kv_pos < window, and kv_pos - q_pos < window when not causal), equal segment ids,
    kv_valid, and `dense`. Positions default to arange(T) / arange(S). If only one of the segment
    id arrays is given it is used for both sides (self-attention; lengths must match).
    Arrays are pytree data; `causal` and `window` are static.
    """

    causal: bool = dataclasses.field(default=False, metadata=dict(static=True))
    window: int | None = dataclasses.field(default=None, metadata=dict(static=True))
    q_positions: Int[Array, "B T"] | None = None
    kv_positions: Int[Array, "B S"] | None = None
    q_segment_ids: Int[Array, "B T"] | None = None
    kv_segment_ids: Int[Array, "B S"] | None = None
    kv_valid: Bool[Array, "B S"] | None = None
    dense: Bool[Array, "B|1 H|1 T S"] | None = None

    def with_window(self, window: int) -> AttentionMask:
        """This mask restricted to a sliding window (the smaller one if a window is already set)."""
        _check_window(window)
        new = window if self.window is None else min(self.window, window)
        return dataclasses.replace(self, window=new)

    def validate(self, q_len: int, kv_len: int, batch: int | None = None, num_heads: int | None = None) -> None:
        """Raise ValueError if an array's shape does not fit queries of length q_len and keys of
        length kv_len (and batch / num_heads when given)."""
        if self.window is not None:
            _check_window(self.window)
        for name, arr, length in (
            ("q_positions", self.q_positions, q_len),
            ("kv_positions", self.kv_positions, kv_len),
            ("q_segment_ids", self.q_segment_ids, q_len),
            ("kv_segment_ids", self.kv_segment_ids, kv_len),
            ("kv_valid", self.kv_valid, kv_len),
        ):
            if arr is None:
                continue
            shape = jnp.shape(arr)
            if (
                len(shape) not in (1, 2)
                or shape[-1] != length
                or (batch is not None and len(shape) == 2 and shape[0] not in (1, batch))
            ):
                raise ValueError(
                    f"AttentionMask.{name} has shape {shape}; expected [B|1, {length}] "
                    f"(batch={batch}, q_len={q_len}, kv_len={kv_len})"
                )
        self._segments(q_len, kv_len)
        if self.dense is not None:
            shape = _as_4d(self.dense).shape
            want = (batch, num_heads, q_len, kv_len)
            if any(d != 1 and w is not None and d != w for d, w in zip(shape, want)):
                raise ValueError(
                    f"AttentionMask.dense has shape {jnp.shape(self.dense)}; expected one "
                    f"broadcastable to [B|1, H|1, T, S] = {want}"
                )

    def _segments(self, q_len: int | None, kv_len: int | None):
        q, kv = self.q_segment_ids, self.kv_segment_ids
        if (q is None) == (kv is None):
            return _as_2d(q), _as_2d(kv)
        given, other = (q, kv_len) if kv is None else (kv, q_len)
        assert given is not None  # exactly one of q, kv is None
        name = "q_segment_ids" if kv is None else "kv_segment_ids"
        if other is not None and jnp.shape(given)[-1] != other:
            raise ValueError(
                f"only AttentionMask.{name} (length {jnp.shape(given)[-1]}) was given, which means "
                f"self-attention, but the other side has length {other}; pass both q_segment_ids "
                "and kv_segment_ids for cross-attention"
            )
        return _as_2d(given), _as_2d(given)

    def _combine(self, q_pos, kv_pos, q_seg, kv_seg, kv_valid, dense, tq: int, tk: int):
        parts = []
        if self.causal or self.window is not None:
            d = q_pos[:, :, None] - kv_pos[:, None, :]
            if self.causal:
                parts.append(d >= 0)
            if self.window is not None:
                parts.append((d < self.window) if self.causal else (jnp.abs(d) < self.window))
        if q_seg is not None:
            parts.append(segment_mask(q_seg, kv_seg))
        if kv_valid is not None:
            parts.append(kv_valid.astype(bool)[:, None, :])
        out = combine_masks(*parts)
        out = jnp.ones((1, 1, 1, 1), bool) if out is None else out[:, None]
        if dense is not None:
            out = out & dense.astype(bool)
        return jnp.broadcast_to(out, out.shape[:2] + (tq, tk))

    def materialize(self, q_len: int, kv_len: int) -> Bool[Array, "B|1 H|1 T S"]:
        """The dense boolean mask, shape [B|1, H|1, q_len, kv_len]."""
        self.validate(q_len, kv_len)
        q_pos = jnp.arange(q_len)[None] if self.q_positions is None else _as_2d(self.q_positions)
        kv_pos = jnp.arange(kv_len)[None] if self.kv_positions is None else _as_2d(self.kv_positions)
        q_seg, kv_seg = self._segments(q_len, kv_len)
        dense = None if self.dense is None else _as_4d(self.dense)
        return self._combine(q_pos, kv_pos, q_seg, kv_seg, _as_2d(self.kv_valid), dense, q_len, kv_len)

    def block(self, q_start, q_len: int, kv_start, kv_len: int) -> Bool[Array, "B|1 H|1 tq tk"]:
        """materialize(T, S)[..., q_start:q_start+q_len, kv_start:kv_start+kv_len] without building
        the T x S mask. Starts may be traced; the block must lie inside the arrays (jax clamps
        out-of-range dynamic slices), so pad the arrays before asking for blocks past the end."""
        q_seg, kv_seg = self._segments(None, None)

        def rows(x, start, size):
            return None if x is None else _slice_last(x, start, size, axis=1)

        q_pos = (
            (q_start + jnp.arange(q_len))[None]
            if self.q_positions is None
            else rows(_as_2d(self.q_positions), q_start, q_len)
        )
        kv_pos = (
            (kv_start + jnp.arange(kv_len))[None]
            if self.kv_positions is None
            else rows(_as_2d(self.kv_positions), kv_start, kv_len)
        )
        dense = None
        if self.dense is not None:
            dense = _slice_last(_slice_last(_as_4d(self.dense), q_start, q_len, 2), kv_start, kv_len, 3)
        return self._combine(
            q_pos,
            kv_pos,
            rows(q_seg, q_start, q_len),
            rows(kv_seg, kv_start, kv_len),
            rows(_as_2d(self.kv_valid), kv_start, kv_len),
            dense,
            q_len,
            kv_len,
        )
