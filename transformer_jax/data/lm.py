"""Language-model pipelines of ``text``, ``shakespeare`` and TFDS catalogs, chosen by ``data.dataset.packing``
through ``PACKINGS``. Both read token shards (``lm_cache.py``: the corpus tokenized once at first use
into the format ``transformer-jax prepare`` writes, cached by content), so training does not hold
the split's tokens in memory (evaluation still reads its split into rows once, as before).

  - ``stream`` (nanoGPT-like): the split's token stream (its records tokenized one by one); training
    rows are windows ``tokens[s : s + T + 1]`` with ``s = offset + w * T`` (``offset`` drawn per
    epoch from the seed in ``[0, T)`` when shuffling), shuffled per epoch, each read from the
    records that hold it (``lm_cache.TokenStream``). Every row is one segment, all weights 1.
    Process p of P takes rows of each global batch (``loader.ProcessRows``), so P processes train
    on the batches of one. Eval: stride-T windows from token 0, last one padded.
  - ``documents``: each document becomes ``[BOS] ids [EOS]`` shifted by one (targets never
    cross documents), truncated to T with one warning, then first-fit packed into rows with
    segment ids and positions (grain's ``FirstFitPackIterDataset`` for training, a
    deterministic first-fit in order for eval). A document is a record of a catalog dataset
    (e.g. an lm1b sentence) or, for local text, a blank-line paragraph or a line; the shards hold
    the documents' ids, several a record, read as needed.

Batches are LM rows (see ``rows.py``) stacked to ``[B, T]``.
"""

from __future__ import annotations

import threading
from functools import cached_property

import grain
import numpy as np

from transformer_jax.core.registry import Registry
from transformer_jax.data import loader, rows
from transformer_jax.data.config import CorpusData, PackedText
from transformer_jax.data.lm_cache import TokenStream, cached_shards
from transformer_jax.data.lm_cache import split_documents as split_documents  # where it was
from transformer_jax.data.shards import TokenShards

PACKINGS: Registry[type[loader.Pipeline]] = Registry("packing")


def _truncation_warning(T: int) -> rows.WarnOnce:
    return rows.WarnOnce(
        f"some documents are longer than data.seq_len={T} tokens (with BOS/EOS) "
        "and were truncated; raise seq_len to keep them whole (warned once)"
    )


class LMPipeline(loader.Pipeline):
    UNIT = "records"  # what a record of the cached shards holds (lm_cache.UNITS)

    def zero_row(self) -> dict[str, np.ndarray]:
        return rows.lm_zero_row(self.cfg.seq_len)

    @cached_property
    def settings(self) -> CorpusData:
        ds = self.cfg.dataset
        if not isinstance(ds, CorpusData):
            raise TypeError(f"data.dataset={ds.kind!r} is not a corpus the LM pipelines tokenize")
        return ds

    def document_split(self) -> str:
        return "paragraph"  # unused by the records of `stream`

    @cached_property
    def shards(self) -> TokenShards:
        """The corpus tokenized into shards (written at first use, then cached)."""
        return cached_shards(self.settings.cache_dir, self.corpus, self.tokenizer, self.UNIT, self.document_split())


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


class _StreamBatch:
    """Window starts [B] -> an LM batch, the windows read from the token shards (picklable)."""

    def __init__(self, stream: TokenStream, T: int):
        self.stream, self.T = stream, T

    def __call__(self, starts: np.ndarray) -> dict[str, np.ndarray]:
        windows = np.stack([self.stream.read(int(s), int(s) + self.T + 1) for s in starts])
        return rows.stream_batch(windows.reshape(-1), np.arange(len(starts)) * (self.T + 1), self.T)


@PACKINGS.register("stream")
class StreamLM(LMPipeline):
    def stream(self, split: str) -> TokenStream:
        return TokenStream(self.shards, split)

    def tokens(self, split: str) -> np.ndarray:
        """The whole split's tokens in one array (evaluation rows, the n-gram counts)."""
        return self.stream(split).all()

    def _length(self, split: str) -> int:
        return int(self.shards.manifest["splits"][split]["tokens"])

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        T, n = self.cfg.seq_len, self._length("train")
        n_windows = (n - T) // T
        if n_windows < 1:
            raise ValueError(
                f"the train split has {n} tokens; data.seq_len={T} needs at "
                f"least {2 * T}: use a larger corpus or a smaller seq_len"
            )
        ds, length = loader.epochs(grain.MapDataset.range(n_windows), self.cfg)
        ds = ds.map_with_index(_WindowStart(T, self.cfg.seed, self.cfg.shuffle, length))
        ds = loader.process_rows(ds, batch_size, process_index, process_count)
        ds = ds.batch(batch_size, drop_remainder=True)
        ds = ds.map(_StreamBatch(self.stream("train"), T))
        return loader.prefetch(loader.to_iter(ds, self.cfg), self.cfg)

    def rows(self, split: str) -> dict[str, np.ndarray]:
        return rows.stream_eval_rows(self.tokens(split), self.cfg.seq_len)

    def split_size(self, split: str) -> dict[str, int]:
        n, T = self._length(split), self.cfg.seq_len
        windows = (n - T) // T if split == "train" else -(-max(n - 1, 0) // T)
        return {"examples": windows, "tokens": n}


class _DocumentExample:
    def __init__(self, T: int, warn: rows.WarnOnce):
        self.T, self.warn = T, warn

    def __call__(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return rows.document_example(ids, self.T, self.warn)


@PACKINGS.register("documents")
class DocumentsLM(LMPipeline):
    UNIT = "documents"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._warn = _truncation_warning(self.cfg.seq_len)

    def document_split(self) -> str:
        ds = self.settings
        return ds.document_split if isinstance(ds, PackedText) else "paragraph"

    def documents(self, split: str):
        """The documents of ``split`` as token ids (read lazily from the shards)."""
        return self.shards.documents(split)

    def _example_fn(self) -> _DocumentExample:
        return _DocumentExample(self.cfg.seq_len, self._warn)

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
