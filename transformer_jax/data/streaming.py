"""Training on prepared token shards (``data.dataset=prepared``), packed on the fly; ``data.dataset.packing``
chooses through ``TOKEN_PACKINGS``.

Training: the train split's documents ``process_index::process_count`` (each process reads only
the records that hold its documents; a record holds several, ``shards.py``), shuffled anew each
epoch (grain's index shuffle: no list of the split is held) and repeated, read lazily by
``read_threads`` threads, then packed (``T = seq_len``):

  - ``stream``: the documents as ``[BOS] ids [EOS]`` one after another; row k is the window
    ``stream[k*T : k*T + T + 1]`` (inputs ``window[:-1]``, targets ``window[1:]``), so every token
    but the first is a target once. One segment per row, as in ``lm.StreamLM``. With ``data.shuffle``,
    rows are shuffled within windows of ``max(256, 8 * batch)`` rows, so a batch does not hold
    consecutive windows of the same documents.
  - ``documents``: ``[BOS] ids [EOS]`` cut into pieces of at most ``T + 1`` tokens overlapping by
    one (a document longer than ``seq_len`` becomes several segments; nothing is dropped), packed
    first-fit (grain's ``FirstFitPackIterDataset``) with segment ids and positions.

Evaluation: the same packing over a split in order, generated lazily: each process builds rows up
to its last batch and keeps rows ``process_index::process_count``; the row count comes from the
manifest (``stream``) or from one pass that stops at the cap (``documents``).

The iterator state is grain's plus ``StreamWindows``'s own: the parent's state before the first
document of the next window and the offset into it (a few integers, whatever the corpus size).
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterator
from typing import Any

import grain
import numpy as np

from transformer_jax.core.registry import Registry
from transformer_jax.data import loader, rows

TOKEN_PACKINGS: Registry[type[PreparedLM]] = Registry("packing")
SHUFFLE_WINDOW_ROWS = 256


def _as_int32(ids: np.ndarray) -> np.ndarray:
    return ids.astype(np.int32)


def _framed(ids: np.ndarray, bos: int, eos: int) -> np.ndarray:
    return np.concatenate(([bos], np.asarray(ids, np.int32), [eos])).astype(np.int32)


def window_rows(windows: np.ndarray) -> dict[str, np.ndarray]:
    """Windows ``[..., T + 1]`` of stream tokens as LM rows ``[..., T]`` (one segment each)."""
    T = windows.shape[-1] - 1
    shape = (*windows.shape[:-1], T)
    return {
        "inputs": windows[..., :-1].astype(np.int32),
        "targets": windows[..., 1:].astype(np.int32),
        "segment_ids": np.ones(shape, np.int32),
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), shape).copy(),
        "weights": np.ones(shape, np.float32),
    }


class _WindowsIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, T: int, bos: int, eos: int):
        super().__init__(parent)
        self._T, self._bos, self._eos = T, bos, eos
        self._docs: list[tuple[Any, np.ndarray]] = []  # (parent state before the document, its framed ids)
        self._offset = 0  # into self._docs[0]

    def __next__(self) -> np.ndarray:
        need = self._T + 1
        have = sum(len(d) for _, d in self._docs) - self._offset
        while have < need:
            state = self._parent.get_state()
            doc = _framed(next(self._parent), self._bos, self._eos)
            self._docs.append((state, doc))
            have += len(doc)
        parts, offset = [], self._offset
        for _, doc in self._docs:
            parts.append(doc[offset : offset + need - sum(map(len, parts))])
            offset = 0
            if sum(map(len, parts)) == need:
                break
        self._offset += self._T
        while self._offset >= len(self._docs[0][1]):
            self._offset -= len(self._docs.pop(0)[1])
        return np.concatenate(parts)

    def get_state(self) -> dict[str, Any]:
        if not self._docs:
            return {"parent": self._parent.get_state(), "offset": self._offset}
        return {"parent": self._docs[0][0], "offset": self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._docs, self._offset = [], int(state["offset"])


class StreamWindows(grain.IterDataset):
    """Documents (token-id arrays) -> the windows ``[T + 1]`` of their ``[BOS] ids [EOS]`` stream."""

    def __init__(self, parent: grain.IterDataset, T: int, bos: int, eos: int):
        super().__init__(parent)
        self._T, self._bos, self._eos = T, bos, eos

    def __iter__(self) -> _WindowsIterator:
        return _WindowsIterator(self._parent.__iter__(), self._T, self._bos, self._eos)

    def __str__(self) -> str:
        return f"StreamWindows(T={self._T})"


def document_pieces(ids: np.ndarray, T: int, bos: int, eos: int) -> list[dict[str, np.ndarray]]:
    """``[BOS] ids [EOS]`` as examples of at most T inputs/targets: windows ``x[k*T : k*T + T + 1]``."""
    x = _framed(ids, bos, eos)
    n = len(x) - 1  # targets
    return [{"inputs": x[s : min(s + T, n)], "targets": x[s + 1 : min(s + T, n) + 1]} for s in range(0, n, T)]


class _Pieces(grain.experimental.FlatMapTransform):
    def __init__(self, T: int, bos: int, eos: int):
        self.T, self.bos, self.eos = T, bos, eos
        self.max_fan_out = 1 << 30  # a document may be of any length

    def flat_map(self, element: np.ndarray) -> list[dict[str, np.ndarray]]:
        return document_pieces(element, self.T, self.bos, self.eos)


def eval_batches_of(
    rows_iter: Iterator[dict[str, np.ndarray]],
    n: int,
    zero: dict[str, np.ndarray],
    batch_size: int,
    process_index: int,
    process_count: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Rows ``process_index::process_count`` of the first ``n`` of ``rows_iter`` in batches, the
    last padded with ``zero``; every process gets the same number of batches."""
    per_process = -(-n // process_count)
    n_batches = -(-per_process // batch_size)
    mine = itertools.islice(rows_iter, process_index, n, process_count)
    for _ in range(n_batches):
        batch = {k: np.broadcast_to(v, (batch_size, *v.shape)).copy() for k, v in zero.items()}
        for i, row in enumerate(itertools.islice(mine, batch_size)):
            for k, v in row.items():
                batch[k][i] = v
        yield batch


class PreparedLM(loader.Pipeline):
    """A packing of prepared shards: training batches (grain) and lazy evaluation batches."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shards = self.corpus.info["shards"]
        self.bos, self.eos = self.tokenizer.bos_id, self.tokenizer.eos_id

    def zero_row(self) -> dict[str, np.ndarray]:
        return rows.lm_zero_row(self.cfg.seq_len)

    def documents(self, split: str, process_index: int, process_count: int) -> grain.IterDataset:
        """This process's documents of ``split`` as token ids: shuffled per epoch, repeated."""
        ds = loader.process_shard(grain.MapDataset.source(self.shards.documents(split)), process_index, process_count)
        ds, _ = loader.epochs(ds, self.cfg)
        return loader.to_iter(ds.map(_as_int32), self.cfg)

    def ordered(self, split: str) -> Iterator[np.ndarray]:
        """The documents of ``split`` in order, once."""
        return iter(self.corpus.split(split))

    @abc.abstractmethod
    def train_rows(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        """This process's training rows, unbatched (``batch_size`` sizes shuffle windows and packing bins)."""

    @abc.abstractmethod
    def eval_row_iter(self, split: str) -> Iterator[dict[str, np.ndarray]]:
        """The rows of one pass over ``split`` in order, generated lazily."""

    @abc.abstractmethod
    def eval_row_count(self, split: str, cap: int | None) -> int:
        """Rows of one pass over ``split`` (at most ``cap``)."""

    def rows(self, split: str) -> dict[str, np.ndarray]:
        return rows.stack_rows(list(self.eval_row_iter(split)))

    def eval_batches(
        self, split: str, batch_size: int, process_index: int, process_count: int, max_batches: int | None
    ) -> Iterator[dict[str, np.ndarray]]:
        cap = None if max_batches is None else max_batches * batch_size * process_count
        n = self.eval_row_count(split, cap)
        return eval_batches_of(self.eval_row_iter(split), n, self.zero_row(), batch_size, process_index, process_count)

    def _split_totals(self, split: str) -> tuple[int, int]:
        """(documents, tokens without BOS/EOS) of ``split``, from the manifest."""
        summary = self.shards.manifest["splits"][split]
        return summary["documents"], summary["tokens"]

    def split_size(self, split: str) -> dict[str, int]:
        """From the manifest: ``examples`` are windows (``stream``) or documents (``documents``),
        ``tokens`` the targets of one pass (each document's ids and EOS)."""
        docs, tokens = self._split_totals(split)
        return {"examples": docs, "tokens": tokens + docs}

    def fingerprint_extra(self) -> dict[str, Any]:
        return {"shards": [e["sha256"] for e in self.shards.manifest["shards"] if e["split"] == "train"]}


@TOKEN_PACKINGS.register("stream")
class PreparedStream(PreparedLM):
    def train_windows(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        docs = self.documents("train", process_index, process_count)
        it = StreamWindows(docs, self.cfg.seq_len, self.bos, self.eos)
        if self.cfg.shuffle:  # consecutive windows hold the same documents: spread them over batches
            window = self.window(batch_size)
            it = grain.experimental.WindowShuffleIterDataset(it, window_size=window, seed=self.cfg.seed)
        return it

    def train_rows(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        return self.train_windows(batch_size, process_index, process_count).map(window_rows)

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        it = self.train_windows(batch_size, process_index, process_count)
        return loader.prefetch(it.batch(batch_size, drop_remainder=True).map(window_rows), self.cfg)

    @staticmethod
    def window(batch_size: int) -> int:
        """Rows shuffled together (grain re-reads at most this many on restore)."""
        return max(SHUFFLE_WINDOW_ROWS, 8 * batch_size)

    def eval_row_iter(self, split: str) -> Iterator[dict[str, np.ndarray]]:
        """Stride-T windows from the first token; the last one padded (segment 0, weight 0)."""
        T, buffer, n = self.cfg.seq_len, [], 0
        for ids in self.ordered(split):
            buffer.append(_framed(ids, self.bos, self.eos))
            n += len(buffer[-1])
            if n >= T + 1:
                stream = np.concatenate(buffer)
                full = (len(stream) - 1) // T
                for k in range(full):
                    yield window_rows(stream[k * T : k * T + T + 1])
                buffer, n = [stream[full * T :]], len(stream) - full * T
        tail = np.concatenate(buffer) if buffer else np.zeros(0, np.int32)
        if len(tail) > 1:
            yield {k: v[0] for k, v in rows.stream_eval_rows(tail, T).items()}

    def eval_row_count(self, split: str, cap: int | None) -> int:
        docs, tokens = self._split_totals(split)
        n = -(-max(tokens + 2 * docs - 1, 0) // self.cfg.seq_len)
        return n if cap is None else min(n, cap)

    def split_size(self, split: str) -> dict[str, int]:
        docs, tokens = self._split_totals(split)
        return {"examples": self.eval_row_count(split, None), "tokens": max(tokens + 2 * docs - 1, 0)}


@TOKEN_PACKINGS.register("documents")
class PreparedDocuments(PreparedLM):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._counts: dict[tuple[str, int | None], int] = {}

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        it = self.train_rows(batch_size, process_index, process_count).batch(batch_size, drop_remainder=True)
        return loader.prefetch(it, self.cfg)

    def train_rows(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        T = self.cfg.seq_len
        docs = self.documents("train", process_index, process_count)
        it = grain.experimental.FlatMapIterDataset(docs, _Pieces(T, self.bos, self.eos))
        it = grain.experimental.FirstFitPackIterDataset(
            it,
            length_struct={"inputs": T, "targets": T},
            num_packing_bins=batch_size,
            seed=self.cfg.seed,
            shuffle_bins=self.cfg.shuffle,
        )
        return it.map(rows.packed_to_lm)

    def eval_row_iter(self, split: str) -> Iterator[dict[str, np.ndarray]]:
        T = self.cfg.seq_len
        pieces = (p for ids in self.ordered(split) for p in document_pieces(ids, T, self.bos, self.eos))
        return rows.pack_first_fit(pieces, T)

    def eval_row_count(self, split: str, cap: int | None) -> int:
        if (split, cap) not in self._counts:
            self._counts[split, cap] = sum(1 for _ in itertools.islice(self.eval_row_iter(split), cap))
        return self._counts[split, cap]
