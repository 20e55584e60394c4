"""Reading and writing safetensors files tensor by tensor, with numpy and ``ml_dtypes`` only.

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
N bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
then the raw little-endian tensor bytes (offsets relative to the end of the header). We parse the
header ourselves so that bfloat16 tensors, which ``safe_open(..., "numpy")`` refuses, load as
``ml_dtypes.bfloat16`` arrays, and we read each tensor with one ``readinto`` into its own buffer:
no memory map whose pages would stay resident, no second copy of the file.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# safetensors dtype code <-> numpy dtype
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_CODES = {v: k for k, v in DTYPES.items()}
_MAX_HEADER = 100 * 2**20
_ALIGN = 64  # XLA's CPU client wraps host buffers aligned like this without copying them
_CHUNK = 2**22  # bytes converted at a time when the stored dtype is not the requested one


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """``np.empty`` whose data is 64-byte aligned, so ``jax.device_put`` on CPU can adopt it as is."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + n].view(dtype).reshape(shape)


class TensorInfo:
    """Where one tensor lives: its file, dtype, shape and absolute byte range."""

    __slots__ = ("begin", "dtype", "end", "file", "shape")

    def __init__(self, file: Path, dtype: np.dtype, shape: tuple[int, ...], begin: int, end: int):
        self.file, self.dtype, self.shape, self.begin, self.end = file, dtype, shape, begin, end

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def read_header(path: str | os.PathLike) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """``({name: TensorInfo}, metadata)`` of one safetensors file; a corrupt header is an error naming the file."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        if n > min(_MAX_HEADER, size - 8):
            raise ValueError(f"{path}: header length {n} does not fit in the file ({size} bytes); the file is corrupt")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: the safetensors header is not valid JSON ({e}); the file is corrupt") from None
    metadata = header.pop("__metadata__", None) or {}
    start, infos = 8 + n, {}
    for name, entry in header.items():
        code = entry.get("dtype")
        if code not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {code!r}; supported: {', '.join(DTYPES)}")
        dtype, shape = DTYPES[code], tuple(int(d) for d in entry["shape"])
        begin, end = (int(o) for o in entry["data_offsets"])
        if end - begin != int(np.prod(shape)) * dtype.itemsize or start + end > size or begin < 0:
            raise ValueError(
                f"{path}: tensor {name!r} ({code} {list(shape)}) has byte range [{begin}, {end}) that does not match "
                f"its shape or lies outside the file; the file is corrupt or truncated"
            )
        infos[name] = TensorInfo(path, dtype, shape, start + begin, start + end)
    return infos, metadata


def checkpoint_files(directory: str | os.PathLike) -> list[Path]:
    """The safetensors files of a Hugging Face model directory (one file, or those its index names)."""
    directory = Path(directory)
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index} has no 'weight_map'; the index is corrupt")
        files = [directory / f for f in dict.fromkeys(weight_map.values())]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names shard(s) that do not exist: {missing}")
        return files
    single = directory / SINGLE_FILE
    if single.is_file():
        return [single]
    found = sorted(p.name for p in directory.glob("*")) if directory.is_dir() else "no such directory"
    raise FileNotFoundError(
        f"{directory} has neither {SINGLE_FILE} nor {INDEX_FILE} (found: {found}); "
        "PyTorch .bin checkpoints are not read: convert them to safetensors first"
    )


class CheckpointReader:
    """The tensors of a model directory (single or sharded safetensors), read one at a time."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.tensors: dict[str, TensorInfo] = {}
        for file in checkpoint_files(directory):
            infos, _ = read_header(file)
            for name, info in infos.items():
                if name in self.tensors:
                    raise ValueError(f"tensor {name!r} is in both {self.tensors[name].file} and {file}")
                self.tensors[name] = info
        self._handles: dict[Path, object] = {}

    def names(self) -> set[str]:
        return set(self.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def nbytes(self, name: str, dtype: np.dtype) -> int:
        """Bytes ``read(name, dtype)`` holds at most: the result, and the stored tensor's when larger."""
        info = self.tensors[name]
        return info.nbytes * max(1, np.dtype(dtype).itemsize // info.dtype.itemsize)

    def read(self, name: str, dtype=None) -> np.ndarray:
        """The tensor as a fresh, 64-byte aligned numpy array (bfloat16 as ``ml_dtypes.bfloat16``),
        converted to ``dtype`` on the way (chunk by chunk: no second full-size buffer) when given."""
        if name not in self.tensors:
            raise KeyError(f"tensor {name!r} is not in the checkpoint at {self.directory}")
        info = self.tensors[name]
        dtype = info.dtype if dtype is None else np.dtype(dtype)
        out = aligned_empty(info.shape, dtype)
        with open(info.file, "rb", buffering=0) as f:
            f.seek(info.begin)
            if dtype == info.dtype:
                _read_exactly(f, out.reshape(-1).view(np.uint8), info, name)
                return out
            flat, step = out.reshape(-1), max(1, _CHUNK // info.dtype.itemsize)
            scratch = np.empty(min(step, flat.size), info.dtype)
            for i in range(0, flat.size, step):
                part = scratch[: min(step, flat.size - i)]
                _read_exactly(f, part.view(np.uint8), info, name)
                flat[i : i + part.size] = part
        return out


def _read_exactly(f, buf: np.ndarray, info: TensorInfo, name: str) -> None:
    view, got = buf.data, 0
    while got < buf.size:
        n = f.readinto(view[got:])
        if not n:
            raise ValueError(f"{info.file}: tensor {name!r} is truncated")
        got += n


def _header_bytes(entries: list[tuple[str, np.dtype, tuple[int, ...]]], metadata: Mapping[str, str]):
    header: dict = {"__metadata__": dict(metadata)}
    offset = 0
    for name, dtype, shape in entries:
        if dtype not in _CODES:
            raise ValueError(f"tensor {name!r}: dtype {dtype} cannot be written to safetensors")
        nbytes = int(np.prod(shape)) * dtype.itemsize
        header[name] = {"dtype": _CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(
    path: str | os.PathLike,
    entries: list[tuple[str, np.dtype, tuple[int, ...]]],
    arrays: Iterable[np.ndarray],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Writes the tensors ``entries`` (name, dtype, shape; the header is written first) whose data
    ``arrays`` yields in the same order, one at a time, so only one tensor is held at once."""
    with open(path, "wb") as f:
        f.write(_header_bytes(entries, metadata or {"format": "pt"}))
        it: Iterator[np.ndarray] = iter(arrays)
        for name, dtype, shape in entries:
            a = next(it, None)
            if a is None or a.dtype != dtype or a.shape != shape:
                got = None if a is None else (a.dtype, a.shape)
                raise ValueError(f"tensor {name!r}: expected {dtype} {shape}, got {got}")
            f.write(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
        if next(it, None) is not None:
            raise ValueError("more arrays than header entries")
