"""Token shards: the files ``transformer-jax prepare`` writes, for training to stream.

A prepared directory holds::

    manifest.json                 format and version, tokenizer, dtype, sources, options, shards
    tokenizer.json                the tokenizer (``load_tokenizer(dir)``)
    train-00000.array_record ...  the train split's shards, in order
    val-00000.array_record ...    the validation split's (with --val-fraction)

Each shard is an ArrayRecord file (``group_size:1``: every record readable on its own, as grain's
``ArrayRecordDataSource`` reads them) holding one record per document: the document's token ids
without BOS/EOS, as a little-endian array of ``manifest["dtype"]`` (``<u2`` when the vocabulary has
at most 65536 ids, else ``<u4``). A split's documents are its shards' records concatenated in the
manifest's order. The manifest lists each shard with its documents, tokens, text bytes, file bytes
and sha256; ``complete`` is false while a run is writing (the shards it lists are finished).

    shards = TokenShards("data/prepared")
    ids = shards.documents("train")[0]          # np.ndarray of the first document's token ids
    source = shards.source("train")             # grain.sources.ArrayRecordDataSource (raw bytes)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "transformer_jax.token_shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SUFFIX = ".array_record"
WRITER_OPTIONS = "group_size:1"
RECORD = "one document per record: its token ids (no BOS/EOS) as a little-endian array of `dtype`"


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest little-endian unsigned type that holds ids ``< vocab_size``."""
    if vocab_size <= 1 << 16:
        return np.dtype("<u2")
    if vocab_size <= 1 << 32:
        return np.dtype("<u4")
    raise ValueError(f"a vocabulary of {vocab_size} ids does not fit 32-bit token ids")


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}{SUFFIX}"


def write_records(path: str | os.PathLike, arrays: Iterable[np.ndarray], dtype: np.dtype) -> int:
    """Writes each array as one record of the ArrayRecord file ``path``; returns the record count."""
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), WRITER_OPTIONS)
    n = 0
    try:
        for ids in arrays:
            writer.write(np.asarray(ids).astype(dtype, copy=False).tobytes())
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
        raise ValueError(
            f"{path} has format_version {manifest.get('format_version')}; this version reads "
            f"{FORMAT_VERSION}: prepare the shards again"
        )
    return manifest


def write_manifest(directory: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Writes ``manifest.json`` atomically (a reader sees the old or the new one, never half)."""
    path = Path(directory) / MANIFEST
    tmp = path.with_name(MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, path)


class _Documents(Sequence):
    """The documents of a split as token-id arrays, read lazily from the shards."""

    def __init__(self, source: Any, dtype: np.dtype):
        self.source, self.dtype = source, dtype

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i):  # pyright: ignore[reportIncompatibleMethodOverride]  # int -> array, slice -> list
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"document {i} of {len(self)}")
        return np.frombuffer(self.source[i % len(self)], dtype=self.dtype)

    def __iter__(self):
        for i in range(len(self)):
            yield np.frombuffer(self.source[i], dtype=self.dtype)


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
        return _Documents(self.source(split), self.dtype)

    def tokenizer(self):
        from transformer_jax.data.tokenizers import load_tokenizer

        return load_tokenizer(self.directory)
