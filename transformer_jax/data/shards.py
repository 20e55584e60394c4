"""Token shards: the files ``transformer-jax prepare`` writes, for training to stream.

A prepared directory holds::

    manifest.json                 format and version, tokenizer, dtype, sources, options, shards
    tokenizer.json                the tokenizer (``load_tokenizer(dir)``)
    train-00000.array_record ...  the train split's shards, in order
    val-00000.array_record ...    the validation split's (with --val-fraction)

Each shard is an ArrayRecord file (``group_size:1``: every record readable on its own, as grain's
``ArrayRecordDataSource`` reads them). Format version 2: a record holds ``documents_per_record``
consecutive documents of the shard (its last record may hold fewer), as

    n: <u4 | ends: <u4[n] (cumulative token counts) | token ids: little-endian ``manifest["dtype"]``

(documents without BOS/EOS; ``<u2`` when the vocabulary has at most 65536 ids, else ``<u4``).
``prepare`` picks ``documents_per_record`` per shard so that a record holds about ``record_kb`` KiB
of token ids on average. Document ``j`` of a shard is item ``j % K`` of its record ``j // K``
(``K = documents_per_record``), so no per-document index is stored or held: a reader keeps the
ArrayRecord index (about 18 bytes a record: ~1.1 MB a GB of ids at the default 16 KiB) and a few
numbers a shard. Reading one document reads (and decompresses) its whole record, so records are
kept small: on the 2-core VM a random read took ~70 us at 8 KiB, ~100 at 16, ~300-450 at 64.
(Version 1 wrote one record per document; its readers' indexes grew with the number of documents,
109 MB for 6.1M; it is refused with a message to prepare again.)

A split's documents are its shards' documents in the manifest's order. The manifest lists each
shard with its documents, records, documents_per_record, tokens, text bytes, file bytes and sha256;
``complete`` is false while a run is writing (the shards it lists are finished).

    shards = TokenShards("data/prepared")
    ids = shards.documents("train")[0]          # np.ndarray of the first document's token ids
    source = shards.source("train")             # grain.sources.ArrayRecordDataSource (raw records)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "transformer_jax.token_shards"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SUFFIX = ".array_record"
WRITER_OPTIONS = "group_size:1"
RECORD = (
    "documents_per_record consecutive documents (the shard's last record: the rest): n <u4, their cumulative "
    "token ends <u4[n], then their token ids (no BOS/EOS) as a little-endian array of `dtype`"
)
_U4 = np.dtype("<u4")


class FormatVersionError(ValueError):
    """A manifest of token shards of another format version."""


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest little-endian unsigned type that holds ids ``< vocab_size``."""
    if vocab_size <= 1 << 16:
        return np.dtype("<u2")
    if vocab_size <= 1 << 32:
        return np.dtype("<u4")
    raise ValueError(f"a vocabulary of {vocab_size} ids does not fit 32-bit token ids")


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}{SUFFIX}"


def documents_per_record(lengths: Sequence[int], itemsize: int, record_bytes: float) -> int:
    """Documents a record of a shard holds: about ``record_bytes`` of ids on average, at least one."""
    total = sum(lengths) * itemsize
    return max(1, int(len(lengths) * record_bytes // max(total, 1)))


def pack_record(arrays: Sequence[np.ndarray], dtype: np.dtype) -> bytes:
    """Documents (token-id arrays) as one record: ``n``, cumulative ends, ids."""
    ends = np.cumsum([len(a) for a in arrays], dtype=np.int64)
    if len(ends) and ends[-1] >= 1 << 32:
        raise ValueError(f"a record of {int(ends[-1])} tokens does not fit 32-bit ends")
    ids = np.concatenate([np.asarray(a) for a in arrays]) if arrays else np.zeros(0)
    return b"".join((np.asarray([len(arrays)], _U4).tobytes(), ends.astype(_U4).tobytes(),
                     ids.astype(dtype, copy=False).tobytes()))  # fmt: skip


def unpack_record(record: bytes, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(starts_and_ends int64[n + 1], ids)`` of a record: document k is ``ids[b[k] : b[k + 1]]``."""
    n = int(np.frombuffer(record, _U4, count=1)[0])
    bounds = np.zeros(n + 1, np.int64)
    bounds[1:] = np.frombuffer(record, _U4, count=n, offset=4)
    ids = np.frombuffer(record, dtype, offset=4 * (n + 1))
    if len(ids) != bounds[-1]:
        raise ValueError(f"a record of {len(ids)} token ids says it holds {bounds[-1]}; prepare the shards again")
    return bounds, ids


def write_records(path: str | os.PathLike, arrays: Sequence[np.ndarray], dtype: np.dtype, per_record: int) -> int:
    """Writes the documents ``arrays``, ``per_record`` a record, to the ArrayRecord file ``path``;
    returns the record count."""
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), WRITER_OPTIONS)
    n = 0
    try:
        for lo in range(0, len(arrays), per_record):
            writer.write(pack_record(arrays[lo : lo + per_record], dtype))
            n += 1
    finally:
        writer.close()
    return n


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a prepared directory, checked for format and version."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; prepare the shards with `transformer-jax prepare`")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); prepare the shards again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a manifest of token shards (format {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise FormatVersionError(
            f"{path} has format_version {manifest.get('format_version')}; this version reads only "
            f"{FORMAT_VERSION} (several documents a record): run the same `transformer-jax prepare` command "
            "again to rewrite the shards"
        )
    return manifest


def write_manifest(directory: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Writes ``manifest.json`` atomically (a reader sees the old or the new one, never half)."""
    path = Path(directory) / MANIFEST
    tmp = path.with_name(MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, path)


class _Documents(Sequence):
    """The documents of a split as token-id arrays, read lazily, a record at a time, from the shards.

    ``entries``: the split's shard entries of the manifest, in order. Document ``i`` is found with
    one search over the shards' first documents (a few numbers a shard); the last record read is
    kept, so reading in order decodes each record once."""

    def __init__(self, source: Any, dtype: np.dtype, entries: Sequence[dict[str, Any]], where: str):
        self.source, self.dtype = source, dtype
        self._doc_starts = np.cumsum([0] + [e["documents"] for e in entries], dtype=np.int64)
        self._rec_starts = np.cumsum([0] + [e["records"] for e in entries], dtype=np.int64)
        self._per = np.asarray([e["documents_per_record"] for e in entries], np.int64)
        if len(source) != self._rec_starts[-1]:
            raise ValueError(
                f"{where}: the shards hold {len(source)} records, the manifest {self._rec_starts[-1]}; "
                "run the same `transformer-jax prepare` command again"
            )
        self._last: tuple[int, Any] = (-1, None)

    def __getstate__(self) -> dict[str, Any]:  # picklable for grain worker processes
        return {**self.__dict__, "_last": (-1, None)}

    def __len__(self) -> int:
        return int(self._doc_starts[-1])

    def _record(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        last = self._last  # one read of the attribute: threads may replace it meanwhile
        if last[0] != r:
            last = (r, unpack_record(self.source[r], self.dtype))
            self._last = last
        return last[1]

    def __getitem__(self, i):  # pyright: ignore[reportIncompatibleMethodOverride]  # int -> array, slice -> list
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} of {n}")
        i = int(i) % n
        s = int(np.searchsorted(self._doc_starts, i, side="right")) - 1
        r, k = divmod(i - int(self._doc_starts[s]), int(self._per[s]))
        bounds, ids = self._record(int(self._rec_starts[s]) + r)
        return ids[bounds[k] : bounds[k + 1]]

    def __iter__(self):
        for r in range(len(self.source)):
            bounds, ids = unpack_record(self.source[r], self.dtype)
            for k in range(len(bounds) - 1):
                yield ids[bounds[k] : bounds[k + 1]]


class TokenShards:
    """A prepared directory: its manifest, tokenizer, and each split's records."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        if not self.manifest.get("complete"):
            raise ValueError(
                f"{self.directory / MANIFEST}: the run that writes these shards has not finished; "
                "run the same `transformer-jax prepare` command again to complete it"
            )
        self.dtype = np.dtype(self.manifest["dtype"])

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.manifest["splits"])

    def files(self, split: str) -> list[Path]:
        if split not in self.manifest["splits"]:
            raise KeyError(f"{self.directory} has no split {split!r}; it has: {', '.join(self.splits)}")
        return [self.directory / name for name in self.manifest["splits"][split]["shards"]]

    def source(self, split: str):
        """grain's random-access source over the split's shards (records are raw bytes)."""
        import grain

        return grain.sources.ArrayRecordDataSource([str(p) for p in self.files(split)])

    def documents(self, split: str) -> Sequence[np.ndarray]:
        by_file = {e["file"]: e for e in self.manifest["shards"]}
        entries = [by_file[p.name] for p in self.files(split)]
        return _Documents(self.source(split), self.dtype, entries, str(self.directory))

    def tokenizer(self):
        from transformer_jax.data.tokenizers import load_tokenizer

        return load_tokenizer(self.directory)
