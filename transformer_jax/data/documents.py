"""Documents of local inputs, streamed in a fixed order: text files, directories, JSONL and Parquet.

``input_files(specs)`` expands the inputs (a file, comma-separated files or a directory, whose
regular non-hidden files are taken recursively in sorted order) and names each file's format by its
suffix: ``.jsonl`` / ``.ndjson`` (optionally ``.gz``) is JSONL, ``.parquet`` is Parquet, anything
else is UTF-8 text (optionally ``.gz``). ``read_documents(source, ...)`` yields the documents of one
file, in file order:

  - text: a ``paragraph`` is a run of lines ended by a blank line (one holding only spaces or tabs),
    a ``line`` is one line, a ``file`` is the whole file; ``\\r\\n`` and ``\\r`` become ``\\n``, a
    leading BOM is dropped (as everywhere in ``textio``).
  - JSONL: the string ``field`` of each non-empty line's object.
  - Parquet: the string column ``field`` (needs ``pyarrow``, the ``parquet`` extra); nulls are skipped.

Documents that are empty or only whitespace are skipped and counted (``Source.skipped``). Every
error names the file (and line) and the fix.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Literal, get_args

from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import textio

FORMATS = ("text", "jsonl", "parquet")
DocumentSplit = Literal["paragraph", "line"]  # how a plain text splits into documents
DOCUMENT_UNITS: tuple[str, ...] = (*get_args(DocumentSplit), "file")  # or one document per file
PARQUET_EXTRA = "pip install 'transformer-jax[parquet]' (pyarrow)"


@dataclasses.dataclass
class Source:
    """One input file: its format, size and checksum, and (once read) its document counts."""

    path: Path
    format: str
    bytes: int = 0
    sha256: str = ""
    documents: int = 0
    skipped: int = 0

    def to_json(self) -> dict:
        return {"path": str(self.path), "format": self.format, "bytes": self.bytes, "sha256": self.sha256}


def file_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    last = suffixes[-1] if suffixes else ""
    return {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}.get(last, "text")


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def input_files(specs: Sequence[str]) -> list[Source]:
    """The files named by ``specs`` (``--input``), in order, with format, size and sha256."""
    files: list[Path] = []
    for spec in specs:
        files += [Path(p) for p in textio.expand_paths(spec, field="--input")]  # prepare refuses URLs
    return [Source(p, file_format(p), p.stat().st_size, sha256_file(p)) for p in files]


def _open_text(path: Path, errors: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", errors=errors, newline=None)
    return open(path, encoding="utf-8-sig", errors=errors, newline=None)


def _text_lines(path: Path, errors: str) -> Iterator[str]:
    """Lines without their newline; a decoding error is reported with its line and byte offset."""
    try:
        with _open_text(path, errors) as f:
            for line in f:
                yield line.rstrip("\n")
    except UnicodeDecodeError as e:
        textio.read_text(path, "strict")  # raises the message naming line, column and byte offset
        raise ValueError(f"{path}: invalid UTF-8 ({e.reason}); convert the file to UTF-8") from None
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot be read as {'gzip ' if path.suffix == '.gz' else ''}text ({e})") from None


def _text_documents(path: Path, unit: str, errors: str) -> Iterator[str]:
    if unit == "file":
        yield textio.read_text(path, errors)[0]
        return
    if unit == "line":
        yield from _text_lines(path, errors)
        return
    paragraph: list[str] = []
    for line in _text_lines(path, errors):
        if line.strip(" \t"):
            paragraph.append(line)
        elif paragraph:
            yield "\n".join(paragraph)
            paragraph = []
    if paragraph:
        yield "\n".join(paragraph)


def _jsonl_documents(path: Path, field: str) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise ValueError(
                        f"{path}, line {n}: not a JSON object ({e}); JSONL holds one object per line"
                    ) from None
                if not isinstance(record, dict) or field not in record:
                    has = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
                    raise ValueError(
                        f"{path}, line {n}: no field {field!r} (the line has: {has or 'nothing'}); "
                        "name the text field with --field"
                    )
                text = record[field]
                if text is None:
                    yield ""
                    continue
                if not isinstance(text, str):
                    raise ValueError(
                        f"{path}, line {n}: field {field!r} is a {type(text).__name__}, not a string; "
                        "name the text field with --field"
                    )
                yield text
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot be read ({e})") from None


def _parquet_documents(path: Path, field: str) -> Iterator[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow: {PARQUET_EXTRA}") from None
    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path}: not a Parquet file ({e})") from None
    schema = table.schema_arrow
    if field not in schema.names:
        raise ValueError(f"{path}: no column {field!r} (it has: {', '.join(schema.names)}); name it with --field")
    kind = schema.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ValueError(f"{path}: column {field!r} holds {kind}, not strings; name the text column with --field")
    for batch in table.iter_batches(columns=[field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            yield "" if text is None else text


def read_documents(source: Source, *, unit: str = "paragraph", field: str = "text", errors: str = "strict"):
    """The non-blank documents of ``source`` in file order (counts kept on ``source``)."""
    source.documents = source.skipped = 0
    if source.format == "jsonl":
        docs = _jsonl_documents(source.path, field)
    elif source.format == "parquet":
        docs = _parquet_documents(source.path, field)
    else:
        docs = _text_documents(source.path, unit, errors)
    for doc in docs:
        if doc.strip():
            source.documents += 1
            yield doc
        else:
            source.skipped += 1
