"""Metric logging: JSON lines plus TensorBoard event files, and a tqdm progress bar.

``workdir/metrics.jsonl`` holds one JSON object per `MetricsWriter.write` call,
``{"step": 100, "time": 1796245310.2, "loss": 2.31, "grad_norm": 0.8, "layer_rms": [1.0, 1.1]}``,
``time`` being the Unix time of the write (so curves can be drawn against wall-clock). The output is
strict JSON: non-finite floats are written as the strings ``"nan"``, ``"inf"``, ``"-inf"``, and
`read_metrics` turns them back into floats. ``workdir/tb/`` holds the same scalars as TensorBoard
event files (tensorboardX; no TensorFlow); a vector ``v`` becomes the scalars ``v/0``, ``v/1``...
"""

from __future__ import annotations

import io
import json
import math
import os
import pathlib
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import tqdm

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def _to_python(name: str, value: Any) -> Any:
    """A JSON-able value: int/float for scalars, (nested) lists for arrays, str kept."""
    if isinstance(value, str):
        return value
    if isinstance(value, jax.Array):
        value = jax.device_get(value)
    if isinstance(value, list | tuple):
        value = np.asarray(value)
    if isinstance(value, bool | np.bool_):
        return float(value)
    if isinstance(value, int | float | np.generic | np.ndarray):
        arr = np.asarray(value)
        if arr.dtype.kind in "iu":
            return arr.tolist()
        if arr.dtype.kind in "fb":
            return arr.astype(np.float64).tolist()
    raise TypeError(
        f"metric {name!r}: {type(value).__name__} is not a number, array or string; "
        f"log a scalar, a vector or a nested dict of them"
    )


def _encode(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _scalars(name: str, value: Any):
    """(tag, float) pairs for TensorBoard: ``name`` itself, or ``name/i[/j...]`` for arrays."""
    if isinstance(value, str):
        return
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        yield name, float(arr)
        return
    for index in np.ndindex(arr.shape):
        yield name + "".join(f"/{i}" for i in index), float(arr[index])


class MetricsWriter:
    """Writes ``{"step": step, **metrics}`` to ``workdir/metrics.jsonl`` and ``workdir/tb/``.

    ``enabled=False`` (every process but process 0) writes nothing and creates no files.
    ``resume_step``: when resuming from a checkpoint at that step, records with a larger step
    are dropped from the JSON lines and TensorBoard is told to purge them (``purge_step``), so a
    restarted run does not leave duplicate steps behind. Nested dicts are flattened into
    ``"eval/loss"`` keys; strings go to the JSON lines only. The JSON file is flushed after each
    write; TensorBoard on `flush` (and every 30 s).
    """

    def __init__(self, workdir: str | os.PathLike, *, enabled: bool = True, resume_step: int | None = None):
        self.workdir = pathlib.Path(workdir)
        self.enabled = enabled
        self._file = None
        self._tb = None
        if not enabled:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / METRICS_FILE
        if resume_step is not None and path.exists():
            kept = [r for r in _read_lines(path) if int(r.get("step", -1)) <= resume_step]
            with open(path, "w") as f:
                f.writelines(json.dumps(_encode_record(r), allow_nan=False) + "\n" for r in kept)
        self._file = open(path, "a")  # noqa: SIM115 - closed by close()
        import tensorboardX  # deferred: it pulls in protobuf

        self._tb = tensorboardX.SummaryWriter(
            str(self.workdir / TB_DIR),
            purge_step=None if resume_step is None else resume_step + 1,
            flush_secs=30,
        )

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log ``metrics`` (scalars, arrays, nested dicts; numpy/jax values allowed) at ``step``."""
        if not self.enabled:
            return
        if self._file is None:
            raise RuntimeError("MetricsWriter.write after close()")
        assert self._tb is not None  # opened and closed together with _file
        flat = _flatten(metrics)
        if "step" in flat:
            raise ValueError("metrics must not contain a 'step' key; pass the step as `step`")
        if "time" in flat:
            raise ValueError("metrics must not contain a 'time' key: the writer stamps each record with it")
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        record.update({name: _to_python(name, value) for name, value in flat.items()})
        self._file.write(json.dumps(_encode_record(record), allow_nan=False) + "\n")
        self._file.flush()
        for name, value in record.items():
            if name not in ("step", "time"):
                for tag, scalar in _scalars(name, value):
                    self._tb.add_scalar(tag, scalar, global_step=record["step"])

    def flush(self) -> None:
        if self.enabled and self._file is not None:
            assert self._tb is not None  # opened and closed together with _file
            self._file.flush()
            self._tb.flush()

    def close(self) -> None:
        if self.enabled and self._file is not None:
            assert self._tb is not None  # opened and closed together with _file
            self._file.close()
            self._tb.close()
            self._file = self._tb = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _encode_record(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _encode(v) for k, v in record.items()}


def _read_lines(path: pathlib.Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a line cut short by a crash
                break
            raise ValueError(f"{path}:{i + 1} is not valid JSON: {line[:80]!r}") from None
        records.append({k: _decode(v) for k, v in record.items()})
    return records


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``workdir/metrics.jsonl`` in file order ("nan"/"inf" back to floats)."""
    path = pathlib.Path(workdir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no {METRICS_FILE} in workdir={str(workdir)!r}")
    return _read_lines(path)


class _LineStream(io.TextIOBase):
    """Turns tqdm's carriage-return refreshes into whole lines, for logs that are not a TTY."""

    def __init__(self, stream):
        self._stream = stream
        self._last = ""

    def write(self, s: str) -> int:
        text = s.replace("\r", "").rstrip()
        key = re.sub(r"\[[^\]]*\]$", "", text)  # the bar without its timing part
        if text and key != self._last:  # tqdm re-prints the same step on write()/close()
            self._stream.write(text + "\n")
            self._last = key
        return len(s)

    def flush(self) -> None:
        self._stream.flush()


def _format(value: Any) -> str:
    value = float(np.asarray(jax.device_get(value)))
    if math.isfinite(value) and abs(value) >= 1e4:
        return tqdm.tqdm.format_sizeof(value)  # 123456 -> "123k"
    return f"{value:.4g}"


class ProgressBar:
    """A tqdm bar over steps: ``step/total``, rate, ETA, and ``update``'s keyword values.

    On a TTY it refreshes in place; otherwise (CI logs, files) it prints a whole line at most
    every ``mininterval`` seconds (default 5). ``enabled=False`` prints nothing.
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        *,
        enabled: bool = True,
        file=None,
        mininterval: float | None = None,
        desc: str = "train",
    ):
        stream = sys.stderr if file is None else file
        tty = bool(getattr(stream, "isatty", lambda: False)())
        self._bar = tqdm.tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="step",
            file=stream if tty else _LineStream(stream),
            mininterval=(0.1 if tty else 5.0) if mininterval is None else mininterval,
            dynamic_ncols=tty,
            ncols=None if tty else 120,
            disable=not enabled,
            smoothing=0.1,
        )

    def update(self, step: int, **postfix: Any) -> None:
        """Move to absolute ``step`` and show ``postfix`` (e.g. ``loss=2.3, tok_s=1.2e5``)."""
        if self._bar.disable:
            return
        if postfix:
            self._bar.set_postfix({k: _format(v) for k, v in postfix.items()}, refresh=False)
        self._bar.update(int(step) - self._bar.n)

    def write(self, message: str) -> None:
        """Print a line without breaking the bar."""
        if not self._bar.disable:
            self._bar.write(message, file=self._bar.fp)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
