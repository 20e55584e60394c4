"""Metric logging to the loggers a run names in its config (``train.log``: JSON lines,
TensorBoard, Weights & Biases; see the module ``train.loggers``), and a tqdm progress bar.

`MetricsWriter.write` stamps each record with its step and the Unix time of the write,
``{"step": 100, "time": 1796245310.2, "loss": 2.31, "grad_norm": 0.8, "layer_rms": [1.0, 1.1]}``
(so curves can be drawn against wall-clock), and hands it to every logger; `read_metrics` reads
``workdir/metrics.jsonl`` (the ``jsonl`` logger) back.
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np
import tqdm

from transformer_jax.core import configlib
from transformer_jax.core.paths import user_path
from transformer_jax.train.loggers import (
    DEFAULT_LOGGERS,
    METRICS_FILE,
    TB_DIR,
    Logger,
    LoggerContext,
    open_loggers,
    read_lines,
)


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


class MetricsWriter:
    """Writes ``{"step": step, "time": now, **metrics}`` to each of ``loggers`` (names of
    ``train.loggers.LOGGERS``; by default JSON lines and TensorBoard) in ``workdir``.

    ``enabled=False`` (every process but process 0) writes nothing and creates no files.
    ``resume_step``: when resuming from a checkpoint at that step, the loggers drop or purge the
    records of later steps (see ``train.loggers``), so a restarted run leaves no duplicate steps.
    Nested dicts are flattened into ``"eval/loss"`` keys. ``run_config``, ``name`` and the
    ``wandb`` settings go to `LoggerContext` (a wandb run shows them).
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        enabled: bool = True,
        resume_step: int | None = None,
        loggers: Iterable[str] = DEFAULT_LOGGERS,
        **context: Any,
    ):
        self.workdir = user_path(workdir, "--workdir")  # a gs:// workdir where the environment provides it
        self.enabled = enabled
        self._loggers: list[Logger] | None = None
        if not enabled:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._loggers = open_loggers(loggers, LoggerContext(self.workdir, resume_step, **context))

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log ``metrics`` (scalars, arrays, nested dicts; numpy/jax values allowed) at ``step``."""
        if not self.enabled:
            return
        if self._loggers is None:
            raise RuntimeError("MetricsWriter.write after close()")
        flat = _flatten(metrics)
        if "step" in flat:
            raise ValueError("metrics must not contain a 'step' key; pass the step as `step`")
        if "time" in flat:
            raise ValueError("metrics must not contain a 'time' key: the writer stamps each record with it")
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        record.update({name: _to_python(name, value) for name, value in flat.items()})
        for logger in self._loggers:
            logger.write(record)

    def flush(self) -> None:
        for logger in self._loggers or ():
            logger.flush()

    def close(self) -> None:
        loggers, self._loggers = self._loggers or [], None
        for logger in loggers:
            logger.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def logger_settings(cfg: Any) -> dict[str, Any]:
    """`MetricsWriter`'s keywords from an experiment ``Config``: its loggers, name and settings."""
    settings = cfg.train.log
    return {
        "loggers": settings.logger_names(),
        "run_config": configlib.to_dict(cfg),
        "name": cfg.name,
        "wandb": settings.wandb,
    }


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``workdir/metrics.jsonl`` in file order ("nan"/"inf" back to floats)."""
    path = user_path(workdir, "--workdir") / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no {METRICS_FILE} in workdir={str(workdir)!r}")
    return read_lines(path)


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


__all__ = [
    "DEFAULT_LOGGERS",
    "METRICS_FILE",
    "TB_DIR",
    "MetricsWriter",
    "ProgressBar",
    "logger_settings",
    "read_metrics",
]
