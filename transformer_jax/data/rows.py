"""NumPy builders of fixed-shape rows and batches (no grain, no JAX).

LM row (``T = seq_len``)::

    inputs      int32[T]    token ids
    targets     int32[T]    next token of the same segment (inputs shifted by one)
    segment_ids int32[T]    0 = padding, 1.. = documents packed into the row
    positions   int32[T]    0.. restarting in each segment
    weights     float32[T]  1 where the target is a real next token of the same segment

Seq2seq row (``S = max_src_len``, ``T = seq_len``)::

    src int32[S], src_segment_ids int32[S] (1 real / 0 pad), src_positions int32[S]
    tgt_in int32[T] (BOS + y), tgt_out int32[T] (y + EOS), tgt_segment_ids, tgt_positions,
    weights float32[T]
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from transformer_jax.core.tokens import BOS_ID, EOS_ID

LM_FIELDS = {
    "inputs": np.int32,
    "targets": np.int32,
    "segment_ids": np.int32,
    "positions": np.int32,
    "weights": np.float32,
}
SEQ2SEQ_FIELDS = {
    "src": ("S", np.int32),
    "src_segment_ids": ("S", np.int32),
    "src_positions": ("S", np.int32),
    "tgt_in": ("T", np.int32),
    "tgt_out": ("T", np.int32),
    "tgt_segment_ids": ("T", np.int32),
    "tgt_positions": ("T", np.int32),
    "weights": ("T", np.float32),
}


class WarnOnce:
    """A thread-safe one-shot warning (e.g. "documents were truncated"), shown once per pipeline."""

    def __init__(self, message: str):
        self.message = message
        self._lock = threading.Lock()
        self.fired = False

    def __call__(self) -> None:
        with self._lock:
            if self.fired:
                return
            self.fired = True
        warnings.warn(self.message, stacklevel=3)

    def __getstate__(self) -> dict:  # picklable for grain worker processes (one warning each)
        return {"message": self.message, "fired": self.fired}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["message"])
        self.fired = state["fired"]


def lm_zero_row(T: int) -> dict[str, np.ndarray]:
    return {k: np.zeros(T, dt) for k, dt in LM_FIELDS.items()}


def seq2seq_zero_row(S: int, T: int) -> dict[str, np.ndarray]:
    return {k: np.zeros(S if d == "S" else T, dt) for k, (d, dt) in SEQ2SEQ_FIELDS.items()}


def stream_batch(tokens: np.ndarray, starts: np.ndarray, T: int) -> dict[str, np.ndarray]:
    """Windows ``tokens[s : s + T + 1]`` (all inside ``tokens``) as an LM batch [len(starts), T]."""
    idx = np.asarray(starts, np.int64)[:, None] + np.arange(T + 1)[None, :]
    window = tokens[idx].astype(np.int32)
    B = len(starts)
    return {
        "inputs": window[:, :-1],
        "targets": window[:, 1:],
        "segment_ids": np.ones((B, T), np.int32),
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
        "weights": np.ones((B, T), np.float32),
    }


def stream_eval_rows(tokens: np.ndarray, T: int) -> dict[str, np.ndarray]:
    """Non-overlapping windows of stride T from token 0; every token but the first is a target
    exactly once. The last window is padded (segment 0, weight 0)."""
    n_targets = max(len(tokens) - 1, 0)
    n_rows = -(-n_targets // T)
    padded = np.zeros(n_rows * T + 1, np.int32)
    padded[: len(tokens)] = tokens
    idx = np.arange(n_rows)[:, None] * T + np.arange(T)[None, :]
    valid = idx < n_targets
    return {
        "inputs": np.where(valid, padded[idx], 0).astype(np.int32),
        "targets": np.where(valid, padded[idx + 1], 0).astype(np.int32),
        "segment_ids": valid.astype(np.int32),
        "positions": np.where(valid, np.arange(T, dtype=np.int32)[None, :], 0).astype(np.int32),
        "weights": valid.astype(np.float32),
    }


def document_example(
    ids: Sequence[int] | np.ndarray, T: int, on_truncate: WarnOnce | None = None
) -> dict[str, np.ndarray]:
    """One document as ``[BOS] + ids + [EOS]`` shifted: inputs/targets of length <= T."""
    x = np.concatenate([[BOS_ID], np.asarray(ids, np.int32), [EOS_ID]]).astype(np.int32)
    if len(x) > T + 1:
        if on_truncate is not None:
            on_truncate()
        x = x[: T + 1]
    return {"inputs": x[:-1], "targets": x[1:]}


def packed_to_lm(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """grain's packer output (``inputs``, ``inputs_segment_ids``, ...) as an LM row/batch."""
    seg = packed["inputs_segment_ids"].astype(np.int32)
    return {
        "inputs": packed["inputs"].astype(np.int32),
        "targets": packed["targets"].astype(np.int32),
        "segment_ids": seg,
        "positions": packed["inputs_positions"].astype(np.int32),
        "weights": (seg > 0).astype(np.float32),
    }


def pack_first_fit(
    examples: Iterable[dict[str, np.ndarray]], T: int, open_rows: int = 16
) -> Iterator[dict[str, np.ndarray]]:
    """Deterministic first-fit packing of document examples into LM rows of length T.

    Each example goes into the first of up to ``open_rows`` open rows with room for it; when
    none has room the oldest row is emitted. Rows come out in a fixed order.
    """
    rows: list[list[dict[str, np.ndarray]]] = []
    used: list[int] = []

    def emit(i: int) -> dict[str, np.ndarray]:
        row = lm_zero_row(T)
        pos = 0
        for seg, ex in enumerate(rows.pop(i), start=1):
            n = len(ex["inputs"])
            row["inputs"][pos : pos + n] = ex["inputs"]
            row["targets"][pos : pos + n] = ex["targets"]
            row["segment_ids"][pos : pos + n] = seg
            row["positions"][pos : pos + n] = np.arange(n)
            row["weights"][pos : pos + n] = 1.0
            pos += n
        used.pop(i)
        return row

    for ex in examples:
        n = len(ex["inputs"])
        if n == 0:
            continue
        slot = next((i for i, u in enumerate(used) if u + n <= T), None)
        if slot is None:
            if len(rows) >= open_rows:
                yield emit(0)
            rows.append([])
            used.append(0)
            slot = len(rows) - 1
        rows[slot].append(ex)
        used[slot] += n
    while rows:
        yield emit(0)


def seq2seq_row(
    src_ids: Sequence[int], tgt_ids: Sequence[int], S: int, T: int, on_truncate: WarnOnce | None = None
) -> dict[str, np.ndarray]:
    """``src = x + [EOS]`` (<= S), ``tgt_in = [BOS] + y``, ``tgt_out = y + [EOS]`` (<= T)."""
    src = np.asarray(src_ids, np.int32)
    tgt = np.asarray(tgt_ids, np.int32)
    if len(src) > S - 1 or len(tgt) > T - 1:
        if on_truncate is not None:
            on_truncate()
        src, tgt = src[: S - 1], tgt[: T - 1]
    row = seq2seq_zero_row(S, T)
    ns, nt = len(src) + 1, len(tgt) + 1
    row["src"][: ns - 1] = src
    row["src"][ns - 1] = EOS_ID
    row["src_segment_ids"][:ns] = 1
    row["src_positions"][:ns] = np.arange(ns)
    row["tgt_in"][0] = BOS_ID
    row["tgt_in"][1:nt] = tgt
    row["tgt_out"][: nt - 1] = tgt
    row["tgt_out"][nt - 1] = EOS_ID
    row["tgt_segment_ids"][:nt] = 1
    row["tgt_positions"][:nt] = np.arange(nt)
    row["weights"][:nt] = 1.0
    return row


def prompt_lm_row(prompt_ids: Sequence[int], sep_id: int, answer_ids: Sequence[int], T: int) -> dict[str, np.ndarray]:
    """``[BOS] prompt SEP answer`` as an LM row with weights only on the answer tokens."""
    x = np.concatenate([[BOS_ID], prompt_ids, [sep_id], answer_ids]).astype(np.int32)
    n = len(x) - 1
    if n > T:
        raise ValueError(f"prompt+answer needs seq_len >= {n}, got seq_len={T}")
    row = lm_zero_row(T)
    row["inputs"][:n] = x[:-1]
    row["targets"][:n] = x[1:]
    row["segment_ids"][:n] = 1
    row["positions"][:n] = np.arange(n)
    row["weights"][n - len(answer_ids) : n] = 1.0
    return row


def stack_rows(rows: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def shard_and_batch(
    rows: dict[str, np.ndarray],
    batch_size: int,
    process_index: int,
    process_count: int,
    zero_row: dict[str, np.ndarray],
    max_batches: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Rows ``process_index::process_count`` in order, in batches; the last one zero-padded.

    Every process yields the same number of batches (``ceil(ceil(N / P) / B)``).
    """
    n = len(next(iter(rows.values())))
    per_process = -(-n // process_count)
    n_batches = -(-per_process // batch_size)
    if max_batches is not None:
        n_batches = min(n_batches, max_batches)
    mine = {k: v[process_index::process_count] for k, v in rows.items()}
    n_mine = len(next(iter(mine.values())))
    for b in range(n_batches):
        lo, hi = b * batch_size, min((b + 1) * batch_size, n_mine)
        batch = {}
        for k, v in mine.items():
            out = np.broadcast_to(zero_row[k], (batch_size, *zero_row[k].shape)).copy()
            if hi > lo:
                out[: hi - lo] = v[lo:hi]
            batch[k] = out
        yield batch
