"""grain plumbing shared by the pipelines, and the checkpointable ``DataIterator``.

Training order: ``shuffle(seed)`` -> ``repeat()`` (grain reshuffles every epoch with seed +
epoch): the global stream, identical in every process -> this process's rows of each global
batch (``ProcessRows``) -> per-example work -> batch -> ``to_iter_dataset`` (thread pool) ->
optional ``mp_prefetch`` -> thread prefetch. (Document packing shards whole documents by
process instead: ``process_shard``.) Everything is a function of (config, batch size, process), so the
iterator state (a small JSON-able dict of indices) resumes the exact order.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import json
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grain
import numpy as np

from transformer_jax.core import configlib, migration
from transformer_jax.data.rows import shard_and_batch

if TYPE_CHECKING:
    from transformer_jax.data.config import DataConfig
    from transformer_jax.data.sources import Corpus
    from transformer_jax.data.tokenizers import Tokenizer

STATE_VERSION = 1
# Fields that do not change which batches come out, so a state saved under one value resumes
# under another.
_RUNTIME_FIELDS = ("prefetch", "read_threads", "worker_count", "cache_dir", "tfds_download", "max_records_in_memory")


def epochs(source: Sequence | grain.MapDataset, cfg: DataConfig) -> tuple[grain.MapDataset, int]:
    """The whole split shuffled anew each epoch and repeated forever (the global training
    stream, the same in every process); and the split length."""
    ds = source if isinstance(source, grain.MapDataset) else grain.MapDataset.source(source)
    length = len(ds)
    if cfg.shuffle:
        ds = ds.shuffle(seed=cfg.seed)
    return ds.repeat(), length


class ProcessRows(grain.MapDataset):
    """This process's rows of every global batch of a global stream.

    With P processes and a per-process batch of b rows, global batch k holds stream elements
    [k*b*P, (k+1)*b*P); process p reads rows [p*b, (p+1)*b) of each, so the global batches (and
    hence training) are the same whatever the number of processes, and no process reads another's
    rows. Element j of this dataset is stream element (j // b) * b * P + p * b + j % b.
    """

    def __init__(self, parent: grain.MapDataset, batch_size: int, process_index: int, process_count: int):
        super().__init__(parent)
        self._b, self._p, self._n = batch_size, process_index, process_count

    def __len__(self) -> int:
        return len(self._parents[0]) // self._n

    def __getitem__(self, j):
        if isinstance(j, slice):
            return self.slice(j)
        b = self._b
        return self._parents[0][(j // b) * b * self._n + self._p * b + j % b]

    def __str__(self) -> str:
        return f"ProcessRows(batch_size={self._b}, process={self._p}/{self._n})"


def process_rows(ds: grain.MapDataset, batch_size: int, process_index: int, process_count: int) -> grain.MapDataset:
    """``ProcessRows`` (the identity for one process)."""
    if process_count == 1:
        return ds
    return ProcessRows(ds, batch_size, process_index, process_count)


def process_shard(source: Sequence | grain.MapDataset, process_index: int, process_count: int) -> grain.MapDataset:
    """``source[process_index::process_count]``: for pipelines that pack whole documents, where
    global batches cannot be cut into per-process rows before packing."""
    ds = source if isinstance(source, grain.MapDataset) else grain.MapDataset.source(source)
    total = len(ds)
    ds = ds[process_index::process_count]
    if len(ds) == 0:
        raise ValueError(
            f"the training split has {total} examples, too few to give process "
            f"{process_index} of {process_count} any; use more data or fewer processes"
        )
    return ds


def _absl_flags_parsed() -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def to_iter(ds: grain.MapDataset, cfg: DataConfig) -> grain.IterDataset:
    """Read with ``read_threads`` threads; with ``worker_count > 0`` also in worker processes."""
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=cfg.read_threads, prefetch_buffer_size=8 * cfg.read_threads))
    if cfg.worker_count > 0:
        _absl_flags_parsed()
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.worker_count))
    return it


def prefetch(it: grain.IterDataset, cfg: DataConfig) -> grain.IterDataset:
    if cfg.prefetch > 0:
        it = grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=cfg.prefetch)
    return it


def pipeline_fingerprint(cfg: DataConfig, tokenizer_json: dict, **extra: Any) -> str:
    """Hash of everything that decides the batch order (not prefetch/threads/cache location), over
    the config's flat layout of before the per-dataset settings, so saved iterator states resume."""
    flat = migration.legacy({"data": configlib.to_dict(cfg)})["data"]
    fields = {k: v for k, v in flat.items() if k not in _RUNTIME_FIELDS}
    blob = json.dumps({"cfg": fields, "tok": tokenizer_json, **extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Pipeline(abc.ABC):
    """Turns a corpus into training batches (grain) and evaluation rows (numpy, in order)."""

    def __init__(self, corpus: Corpus, tokenizer: Tokenizer, cfg: DataConfig):
        self.corpus, self.tokenizer, self.cfg = corpus, tokenizer, cfg
        self._eval_rows: dict[str, dict[str, np.ndarray]] = {}

    @abc.abstractmethod
    def zero_row(self) -> dict[str, np.ndarray]:
        """A padding row: the shapes and dtypes of one batch row, all zeros."""

    @abc.abstractmethod
    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        """Infinite batches of this process's shard."""

    @abc.abstractmethod
    def rows(self, split: str) -> dict[str, np.ndarray]:
        """All rows of ``split`` in order (one deterministic pass), stacked."""

    def eval_rows(self, split: str) -> dict[str, np.ndarray]:
        if split not in self._eval_rows:
            self._eval_rows[split] = self.rows(split)
        return self._eval_rows[split]

    def eval_batches(
        self, split: str, batch_size: int, process_index: int, process_count: int, max_batches: int | None
    ) -> Iterator[dict[str, np.ndarray]]:
        """This process's batches of one pass over ``split`` in order (``rows.shard_and_batch``)."""
        rows = self.eval_rows(split)
        return shard_and_batch(rows, batch_size, process_index, process_count, self.zero_row(), max_batches)

    def fingerprint_extra(self) -> dict[str, Any]:
        """What else decides the batch order besides the config and tokenizer (e.g. the data's checksums)."""
        return {}

    def split_size(self, split: str) -> dict[str, int]:
        """Examples (rows) and target tokens (weight 1) in one pass over ``split``."""
        rows = self.eval_rows(split) if split != "train" else self.rows(split)
        return {"examples": len(rows["weights"]), "tokens": int(rows["weights"].sum())}


def _close(box: list) -> None:
    # Close and drop the grain iterator while its modules are alive (grain's own __del__ at
    # interpreter teardown raises on half-finalized modules otherwise).
    while box:
        box.pop().close()


class DataIterator:
    """An infinite, checkpointable iterator of batches (dicts of numpy arrays).

    ``get_state()`` returns a JSON-serialisable dict; ``set_state(state)`` on a fresh iterator of
    the same pipeline makes it yield exactly the batches the saved one would have yielded next.
    Call ``close()`` (or use ``with``) to stop the prefetch threads early.
    """

    def __init__(self, dataset: grain.IterDataset, fingerprint: str):
        self.fingerprint = fingerprint
        self._box = [iter(dataset)]
        self._finalizer = weakref.finalize(self, _close, self._box)

    @property
    def _it(self) -> grain.DatasetIterator:
        if not self._box:
            raise RuntimeError("this DataIterator is closed")
        return self._box[0]

    def __iter__(self) -> DataIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._it)

    def get_state(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "fingerprint": self.fingerprint, "grain": copy.deepcopy(self._it.get_state())}

    def set_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a DataIterator state (version {STATE_VERSION}): {str(state)[:120]}")
        if state["fingerprint"] != self.fingerprint:
            raise ValueError(
                f"the iterator state was saved for another data pipeline (fingerprint "
                f"{state['fingerprint']} != {self.fingerprint}): the data config, batch size, "
                "process index/count, tokenizer or prepared shards differ from the run that saved it"
            )
        self._it.set_state(copy.deepcopy(state["grain"]))

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> DataIterator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
