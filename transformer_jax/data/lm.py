"""Language-model pipelines, chosen by ``data.packing`` through ``PACKINGS``.

  - ``stream`` (nanoGPT-like): the split's text is tokenized once into one array; training rows
    are windows ``tokens[s : s + T + 1]`` with ``s = offset + w * T`` (``offset`` drawn per
    epoch from the seed in ``[0, T)`` when shuffling), shuffled per epoch. Every row is one
    segment, all weights 1. Eval: stride-T windows from token 0, last one padded.
  - ``documents``: each document becomes ``[BOS] ids [EOS]`` shifted by one (targets never
    cross documents), truncated to T with one warning, then first-fit packed into rows with
    segment ids and positions (grain's ``FirstFitPackIterDataset`` for training, a
    deterministic first-fit in order for eval). A document is a record of a catalog dataset
    (e.g. an lm1b sentence) or, for local text, a blank-line paragraph or a line.

Batches are LM rows (see ``rows.py``) stacked to ``[B, T]``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import partial

import grain
import numpy as np

from transformer_jax.core.registry import Registry
from transformer_jax.data import loader, rows
from transformer_jax.data.variants import DOCUMENT_SPLITS

PACKINGS: Registry[type[loader.Pipeline]] = Registry("packing")


def _truncation_warning(T: int) -> rows.WarnOnce:
    return rows.WarnOnce(
        f"some documents are longer than data.seq_len={T} tokens (with BOS/EOS) "
        "and were truncated; raise seq_len to keep them whole (warned once)"
    )


class LMPipeline(loader.Pipeline):
    def zero_row(self) -> dict[str, np.ndarray]:
        return rows.lm_zero_row(self.cfg.seq_len)


class _WindowStart:
    """Window start of element ``w`` at global index ``i``: ``offset(epoch) + w * T``."""

    def __init__(self, T: int, seed: int, shuffle: bool, shard_len: int):
        self.T, self.seed, self.shuffle, self.shard_len = T, seed, shuffle, shard_len
        self._cache: tuple[int, int] = (-1, 0)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # picklable for grain worker processes
        return {"T": self.T, "seed": self.seed, "shuffle": self.shuffle, "shard_len": self.shard_len}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def offset(self, epoch: int) -> int:
        if not self.shuffle:
            return 0
        with self._lock:
            cached_epoch, off = self._cache
            if cached_epoch != epoch:
                off = int(np.random.default_rng((self.seed, epoch, 0x5EED)).integers(self.T))
                self._cache = (epoch, off)
        return off

    def __call__(self, i: int, w: int) -> int:
        return self.offset(i // self.shard_len) + int(w) * self.T


def _stream_batch(starts: np.ndarray, tokens: np.ndarray, T: int) -> dict[str, np.ndarray]:
    return rows.stream_batch(tokens, starts, T)


@PACKINGS.register("stream")
class StreamLM(LMPipeline):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tokens: dict[str, np.ndarray] = {}

    def tokens(self, split: str) -> np.ndarray:
        """The split tokenized into one array (uint16 when the vocabulary allows)."""
        if split not in self._tokens:
            dtype = np.uint16 if self.tokenizer.vocab_size <= np.iinfo(np.uint16).max else np.int32
            records = self.corpus.split(split)
            joiner = self.tokenizer.encode_np(self.corpus.joiner)
            parts: list[np.ndarray] = []
            for k, record in enumerate(records):
                if k and len(joiner):
                    parts.append(joiner)
                parts.append(self.tokenizer.encode_np(record))
            self._tokens[split] = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
        return self._tokens[split]

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        T, tokens = self.cfg.seq_len, self.tokens("train")
        n_windows = (len(tokens) - T) // T
        if n_windows < 1:
            raise ValueError(
                f"the train split has {len(tokens)} tokens; data.seq_len={T} needs at "
                f"least {2 * T}: use a larger corpus or a smaller seq_len"
            )
        ds, length = loader.epochs(grain.MapDataset.range(n_windows), self.cfg)
        ds = ds.map_with_index(_WindowStart(T, self.cfg.seed, self.cfg.shuffle, length))
        ds = loader.process_rows(ds, batch_size, process_index, process_count)
        ds = ds.batch(batch_size, drop_remainder=True)
        ds = ds.map(partial(_stream_batch, tokens=tokens, T=T))
        return loader.prefetch(loader.to_iter(ds, self.cfg), self.cfg)

    def rows(self, split: str) -> dict[str, np.ndarray]:
        return rows.stream_eval_rows(self.tokens(split), self.cfg.seq_len)

    def split_size(self, split: str) -> dict[str, int]:
        n, T = len(self.tokens(split)), self.cfg.seq_len
        windows = (n - T) // T if split == "train" else -(-max(n - 1, 0) // T)
        return {"examples": windows, "tokens": n}


def split_documents(text: str, how: str) -> list[str]:
    """Documents of a plain text: blank-line separated ``paragraph``s or non-empty ``line``s."""
    pieces = DOCUMENT_SPLITS.get(how)(text)
    return [p.strip("\n") for p in pieces if p.strip()]


class _DocumentExample:
    def __init__(self, tokenizer, T: int, warn: rows.WarnOnce):
        self.tokenizer, self.T, self.warn = tokenizer, T, warn

    def __call__(self, doc: str) -> dict[str, np.ndarray]:
        return rows.document_example(self.tokenizer.encode_np(doc), self.T, self.warn)


@PACKINGS.register("documents")
class DocumentsLM(LMPipeline):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._warn = _truncation_warning(self.cfg.seq_len)

    def documents(self, split: str) -> Sequence[str]:
        if self.corpus.records_are_documents:
            return self.corpus.split(split)
        return split_documents(self.corpus.text(split), self.cfg.document_split)

    def _example_fn(self) -> _DocumentExample:
        return _DocumentExample(self.tokenizer, self.cfg.seq_len, self._warn)

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        T = self.cfg.seq_len
        ds, _ = loader.epochs(loader.process_shard(self.documents("train"), process_index, process_count), self.cfg)
        it = loader.to_iter(ds.map(self._example_fn()), self.cfg)
        it = grain.experimental.FirstFitPackIterDataset(
            it,
            length_struct={"inputs": T, "targets": T},
            num_packing_bins=batch_size,
            seed=self.cfg.seed,
            shuffle_bins=self.cfg.shuffle,
        )
        it = it.map(rows.packed_to_lm).batch(batch_size, drop_remainder=True)
        return loader.prefetch(it, self.cfg)

    def rows(self, split: str) -> dict[str, np.ndarray]:
        make = self._example_fn()
        packed = list(rows.pack_first_fit((make(d) for d in self.documents(split)), self.cfg.seq_len))
        if not packed:
            raise ValueError(f"split {split!r} of {self.corpus.name} has no documents")
        return rows.stack_rows(packed)
