"""The LM corpora of ``text``, ``shakespeare`` and TFDS catalogs, tokenized once into token shards.

``lm.py``'s packings read their tokens from a prepared directory (``shards.py``'s format, the one
``transformer-jax prepare`` writes) instead of tokenizing the split into memory at every start:
``cached_shards(cache_dir, corpus, tokenizer, unit)`` writes it at first use into
``{cache_dir}/prepared_lm/{key}``, ``key`` a hash of the corpus's identity (its TFDS data dir, itself
keyed by the input files' paths, sizes and mtimes, and the split options), the unit, and the
tokenizer, and reuses it afterwards. Two units:

  - ``records``: the corpus's records in order, each tokenized as the in-memory stream tokenized
    them (``encode(joiner)`` before every record but the first), so the records' ids concatenated
    are the split's token stream; ``TokenStream`` reads windows of it from the records holding them,
    with the per-record token offsets saved beside the shards (``{split}.record_starts.npy``).
  - ``documents``: the documents ``data.dataset.document_split`` cuts the text into (or the records, when
    they are documents), one document each, as ``prepare`` stores documents.

Writers race safely: each writes into a temporary directory renamed into place, and a directory
that is already there (and complete) wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from transformer_jax.data import shards
from transformer_jax.data.documents import DocumentSplit

if TYPE_CHECKING:
    from transformer_jax.data.sources import Corpus
    from transformer_jax.data.tokenizers import Tokenizer

UNITS = ("records", "documents")
CACHE_VERSION = 1
SHARD_BYTES = 64 * 1024 * 1024  # of token ids
RECORD_BYTES = 16 * 1024
STARTS = "{split}.record_starts.npy"


def cache_key(corpus: Corpus, tokenizer: Tokenizer, unit: str, document_split: str) -> str:
    tok = hashlib.sha256(json.dumps(tokenizer.to_json(), sort_keys=True, default=str).encode()).hexdigest()
    identity = {
        "corpus": corpus.name,
        "data_dir": corpus.info.get("data_dir"),
        "plays": corpus.info.get("plays"),
        "unit": unit,
        "document_split": document_split if unit == "documents" and not corpus.records_are_documents else None,
        "joiner": corpus.joiner,
        "tokenizer": tok,
        "format_version": shards.FORMAT_VERSION,
        "cache_version": CACHE_VERSION,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:24]


def split_documents(text: str, how: str) -> list[str]:
    """Documents of a plain text: blank-line separated ``paragraph``s or non-empty ``line``s."""
    if how not in get_args(DocumentSplit):
        raise ValueError(f"document split {how!r}: choose one of {', '.join(get_args(DocumentSplit))}")
    pieces = re.split(r"\n[ \t]*\n", text) if how == "paragraph" else text.split("\n")
    return [p.strip("\n") for p in pieces if p.strip()]


def _units(corpus: Corpus, split: str, unit: str, document_split: str) -> Iterator[str]:
    if unit == "records" or corpus.records_are_documents:
        yield from corpus.split(split)
    else:
        yield from split_documents(corpus.text(split), document_split)


def _arrays(corpus: Corpus, tokenizer: Tokenizer, split: str, unit: str, document_split: str) -> Iterator[np.ndarray]:
    joiner = tokenizer.encode_np(corpus.joiner) if unit == "records" else np.zeros(0, np.int32)
    for k, text in enumerate(_units(corpus, split, unit, document_split)):
        ids = tokenizer.encode_np(text)
        yield np.concatenate([joiner, ids]) if k and len(joiner) else ids


def _write_split(out: Path, split: str, arrays: Iterator[np.ndarray], dtype: np.dtype) -> list[dict[str, Any]]:
    """Shards of about ``SHARD_BYTES`` of ids, records of about ``RECORD_BYTES``; the record offsets."""
    entries: list[dict[str, Any]] = []
    record_tokens: list[int] = []

    def flush(batch: list[np.ndarray]) -> None:
        name = shards.shard_name(split, len(entries))
        lengths = [len(a) for a in batch]
        per = shards.documents_per_record(lengths, dtype.itemsize, RECORD_BYTES)
        records = shards.write_records(out / name, batch, dtype, per)
        record_tokens.extend(sum(lengths[lo : lo + per]) for lo in range(0, len(batch), per))
        entries.append({"file": name, "split": split, "index": len(entries), "documents": len(batch),
                        "records": records, "documents_per_record": per, "tokens": sum(lengths)})  # fmt: skip

    batch, size = [], 0
    for ids in arrays:
        batch.append(ids)
        size += len(ids) * dtype.itemsize
        if size >= SHARD_BYTES:
            flush(batch)
            batch, size = [], 0
    if batch or not entries:
        flush(batch)
    np.save(out / STARTS.format(split=split), np.concatenate([[0], np.cumsum(record_tokens, dtype=np.int64)]))
    return entries


def _write(out: Path, corpus: Corpus, tokenizer: Tokenizer, unit: str, document_split: str) -> None:
    dtype = shards.token_dtype(tokenizer.vocab_size)
    entries, splits = [], {}
    for split in corpus.splits:
        mine = _write_split(out, split, _arrays(corpus, tokenizer, split, unit, document_split), dtype)
        entries += mine
        splits[split] = {"documents": sum(e["documents"] for e in mine), "tokens": sum(e["tokens"] for e in mine),
                         "shards": [e["file"] for e in mine]}  # fmt: skip
    tokenizer.save(out)
    shards.write_manifest(out, {
        "format": shards.FORMAT, "format_version": shards.FORMAT_VERSION, "complete": True,
        "corpus": corpus.name, "unit": unit, "dtype": dtype.str, "record": shards.RECORD,
        "writer_options": shards.WRITER_OPTIONS, "shards": entries, "splits": splits,
    })  # fmt: skip


def cache_root(cache_dir: str | None) -> Path:
    from transformer_jax.data.builders import default_cache_dir

    return (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "prepared_lm"


def cached_shards(
    cache_dir: str | None, corpus: Corpus, tokenizer: Tokenizer, unit: str, document_split: str = "paragraph"
) -> shards.TokenShards:
    """The prepared directory of ``corpus`` under ``cache_dir`` (written now unless a complete one is
    cached); ``document_split`` cuts the documents of a plain text (unit ``documents``)."""
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r}: choose one of {', '.join(UNITS)}")
    final = cache_root(cache_dir) / cache_key(corpus, tokenizer, unit, document_split)
    if not (final / shards.MANIFEST).is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=final.parent))
        try:
            _write(tmp, corpus, tokenizer, unit, document_split)
            if final.exists() and not (final / shards.MANIFEST).is_file():  # an interrupted writer's leftover
                shutil.rmtree(final, ignore_errors=True)
            try:
                os.replace(tmp, final)
            except OSError:  # another writer renamed its copy first
                if not (final / shards.MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return shards.TokenShards(final)


class TokenStream:
    """The token stream of a split stored as ``records`` (``cached_shards``): windows are read from
    the records that hold them (the last record read is kept); nothing of the split is held but the
    records' token offsets (8 bytes a record)."""

    def __init__(self, prepared: shards.TokenShards, split: str):
        self.source: Any = prepared.source(split)
        self.dtype = prepared.dtype
        self.starts = np.load(prepared.directory / STARTS.format(split=split))
        if len(self.starts) != len(self.source) + 1:
            raise ValueError(f"{prepared.directory}: {split} has {len(self.source)} records, its offsets "
                             f"{len(self.starts) - 1}; delete the directory to prepare it again")  # fmt: skip
        self._last: tuple[int, Any] = (-1, None)

    def __getstate__(self) -> dict[str, Any]:  # picklable for grain worker processes
        return {**self.__dict__, "_last": (-1, None)}

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _ids(self, r: int) -> np.ndarray:
        last = self._last
        if last[0] != r:
            last = (r, shards.unpack_record(self.source[r], self.dtype)[1])
            self._last = last
        return last[1]

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Tokens ``[lo, hi)`` of the stream (int32)."""
        out = np.empty(max(hi - lo, 0), np.int32)
        r, at = int(np.searchsorted(self.starts, lo, side="right")) - 1, lo
        while at < hi:
            base, end = int(self.starts[r]), int(self.starts[r + 1])
            take = min(hi, end) - at
            out[at - lo : at - lo + take] = self._ids(r)[at - base : at - base + take]
            at += take
            r += 1
        return out

    def all(self) -> np.ndarray:
        return self.read(0, len(self))
