"""Reading text files: path lists, gzip, UTF-8 errors that name the file/line/byte offset.

Every error names the file and the fix. ``decode_errors="strict"`` raises on non-UTF-8 bytes;
``"replace"`` substitutes U+FFFD and warns once per ``read_texts`` call.

A URL (``gs://bucket/corpus.txt``, or a folder of them) is read through ``etils.epath`` where the
environment provides the scheme's backend, and comes back as an ``epath.Path``; a local path comes
back as a ``pathlib.Path`` (callers read ``stat().st_size`` of local files).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, get_args

from etils import epath

from transformer_jax.core.paths import check_reachable, is_url, user_path

DecodeErrors = Literal["strict", "replace"]  # non-UTF-8 bytes: an error naming the file, or U+FFFD with a warning
DECODE_ERRORS: tuple[str, ...] = get_args(DecodeErrors)

FilePath = Path | epath.Path  # a local file, or a URL's epath.Path


def _files_under(path: FilePath) -> list[FilePath]:
    """The regular, non-hidden files under the directory ``path`` (recursively), sorted by path."""
    if isinstance(path, Path):
        found = (p for p in path.rglob("*") if p.is_file())
        return sorted(p for p in found if not any(s.startswith(".") for s in p.relative_to(path).parts))
    files = []  # by iterdir, not walk: fsspec's walk names folders without their gs://
    for child in path.iterdir():
        if not child.name.startswith("."):
            files += _files_under(child) if child.is_dir() else [child]
    return sorted(files, key=str)


def expand_paths(spec: str, *, field: str = "data.dataset.path") -> list[FilePath]:
    """Files named by ``spec``: one path, several comma-separated, or a directory.

    A directory stands for its regular, non-hidden files (recursively), sorted by path.
    """
    files: list[FilePath] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        path: FilePath = Path(part).expanduser()
        if is_url(part):
            path = user_path(part, field)
            check_reachable(path, field)
        if path.is_dir():
            found = _files_under(path)
            if not found:
                raise FileNotFoundError(f"{field}: directory {path} contains no files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(
                f"{field}: {path} does not exist (give a file, comma-separated files or a directory of text files)"
            )
    if not files:
        raise FileNotFoundError(f"{field}={spec!r} names no files")
    return files


def read_bytes(path: FilePath) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    if path.suffix == ".gz":
        with path.open("rb") as raw, gzip.GzipFile(fileobj=raw) as f:
            try:
                return f.read()
            except (OSError, EOFError) as e:
                raise ValueError(f"{path}: not a valid gzip file ({e})") from None
    return path.read_bytes()


def decode(data: bytes, path: FilePath, errors: str) -> tuple[str, int]:
    """Decode UTF-8 (dropping a BOM, normalising newlines); returns (text, n_bad_bytes)."""
    if errors not in DECODE_ERRORS:
        raise ValueError(f"decode_errors={errors!r}; choose one of {', '.join(DECODE_ERRORS)}")
    try:
        text, bad = data.decode("utf-8-sig"), 0
    except UnicodeDecodeError as e:
        if errors == "strict":
            line = data.count(b"\n", 0, e.start) + 1
            column = e.start - (data.rfind(b"\n", 0, e.start) + 1)
            raise ValueError(
                f"{path}: line {line}, column {column} (byte offset {e.start}): invalid UTF-8 "
                f"byte 0x{data[e.start]:02x} ({e.reason}); convert the file to UTF-8 or set "
                "data.dataset.decode_errors=replace"
            ) from None
        text = data.decode("utf-8-sig", errors="replace")
        bad = text.count("\ufffd") - data.count("\ufffd".encode())
    return text.replace("\r\n", "\n").replace("\r", "\n"), bad


def read_text(path: FilePath, errors: str = "strict") -> tuple[str, int]:
    return decode(read_bytes(path), path, errors)


def read_texts(paths: Iterable[FilePath], errors: str = "strict", *, field: str = "data.dataset.path") -> str:
    """Concatenate files (a newline is added after a file that lacks one); error if empty."""
    paths = list(paths)
    parts, replaced = [], []
    for path in paths:
        text, bad = read_text(path, errors)
        if bad:
            replaced.append(f"{path} ({bad})")
        if text and not text.endswith("\n"):
            text += "\n"
        parts.append(text)
    if replaced:
        warnings.warn(
            "replaced non-UTF-8 bytes with U+FFFD (decode_errors=replace) in: " + ", ".join(replaced),
            stacklevel=2,
        )
    text = "".join(parts)
    if not text.strip():
        names = ", ".join(str(p) for p in paths)
        raise ValueError(f"{field}: {names} is empty (after stripping whitespace); give a non-empty text corpus")
    return text


def read_lines(path: FilePath, errors: str = "strict") -> list[str]:
    """Lines of a file without their newline (a trailing newline adds no empty line)."""
    text, bad = read_text(path, errors)
    if bad:
        warnings.warn(f"{path}: replaced {bad} non-UTF-8 bytes with U+FFFD", stacklevel=2)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def fingerprint(files: Iterable[FilePath], **options) -> str:
    """Hash of resolved paths, sizes, mtimes and options: a changed input gives a new hash."""
    h = hashlib.sha256()
    for f in files:
        if isinstance(f, Path):
            st = f.stat()
            h.update(f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        else:  # a URL: its object's size and modification time
            remote = f.stat()
            h.update(f"{f}|{remote.length}|{remote.mtime}\n".encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def chunk_at_lines(text: str, size: int) -> list[str]:
    """Cut ``text`` into ordered chunks of about ``size`` characters, ending at line ends.

    ``"".join(chunks) == text``. A line longer than ``size`` stays whole in its chunk.
    """
    chunks, start, n = [], 0, len(text)
    while start < n:
        end = min(start + size, n)
        if end < n:
            cut = text.rfind("\n", start, end)
            if cut < 0:
                cut = text.find("\n", end)
            end = n if cut < 0 else cut + 1
        chunks.append(text[start:end])
        start = end
    return chunks
