"""Metric loggers: ``jsonl`` and ``tensorboard`` chosen by name (``train.log.loggers``), ``wandb`` with its
settings (``train.log.wandb``, `WandbConfig`; None: no wandb).

`MetricsWriter` (``train.metrics``) checks and flattens each record, ``{"step": 100, "time":
1796245310.2, "train/loss": 2.31, "train/layer_rms": [1.0, 1.1]}``, and hands it to every chosen
logger. Each logger is registered with the module it imports and the extra that installs it, so a
logger whose package is missing is an error naming the extra (`check_installed`), never a skip.

- ``jsonl``: ``workdir/metrics.jsonl``, one strict-JSON object per record (non-finite floats as the
  strings ``"nan"``, ``"inf"``, ``"-inf"``; ``metrics.read_metrics`` turns them back). In a
  ``gs://`` workdir (objects cannot be appended to) the file is rewritten at most every
  ``REMOTE_FLUSH_S`` seconds and at close.
- ``tensorboard``: event files in ``workdir/tb/`` (tensorboardX, a dependency; the viewer is the
  ``tensorboard`` extra: ``tensorboard --logdir WORKDIR/tb``); a vector ``v`` is logged as the
  scalars ``v/0``, ``v/1``...; strings are not logged. tensorboardX writes ``gs://`` (with
  ``google-cloud-storage``) and ``s3://`` (with ``boto3``) itself; other schemes are an error.
- ``wandb``: one Weights & Biases run per invocation (``--set train.log.wandb=on``), its files in ``workdir/wandb/`` (or
  ``$WANDB_DIR``; for a remote workdir wandb's default local folder), grouped by the workdir's name,
  with the run's config; scalars as for TensorBoard, strings as text. ``WANDB_MODE=offline`` logs
  without network (``wandb sync`` uploads later).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.util
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
from etils import epath

from transformer_jax.core.configlib import Config, ConfigError, fail
from transformer_jax.core.paths import is_url
from transformer_jax.core.registry import Registry

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"
WANDB_DIR = "wandb"
DEFAULT_LOGGERS = ("jsonl", "tensorboard")  # train.log.loggers by default
REMOTE_FLUSH_S = 30.0  # a remote metrics.jsonl is rewritten at most this often (and at close)
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclasses.dataclass(frozen=True)
class WandbConfig(Config):
    """The ``wandb`` logger's settings (``train.log.wandb``): its Weights & Biases ``project`` and
    ``entity`` (a team or user; None: the logged-in user's default)."""

    project: str = "transformer-jax"
    entity: str | None = None

    PATH: ClassVar[str] = "train.log.wandb"

    def check(self) -> None:
        if not self.project.strip():
            fail(f"{self.PATH}.project", self.project, "must be a non-empty project name")
        if self.entity is not None and not self.entity.strip():
            fail(f"{self.PATH}.entity", self.entity, "must be a team or user name", "or None for your default")


@dataclasses.dataclass(frozen=True)
class LoggerContext:
    """What a logger may need when it opens: where, from which step, and the run's settings."""

    workdir: epath.Path  # absolute when local, a URL (gs://...) as given
    resume_step: int | None = None  # resuming from this checkpoint step: later records are stale
    run_config: Mapping[str, Any] | None = None  # the run's config as a dict (wandb shows it)
    name: str = "experiment"
    wandb: WandbConfig | None = None  # the wandb logger's settings (it opens with the defaults when None)


class Logger(abc.ABC):
    """Receives every record (``step``, ``time`` and flat metric names) until `close`."""

    @abc.abstractmethod
    def write(self, record: Mapping[str, Any]) -> None: ...

    @abc.abstractmethod
    def flush(self) -> None:
        """Push buffered records out."""

    @abc.abstractmethod
    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class LoggerSpec:
    """A registered logger: how to open it, the module it imports, the extra that installs it."""

    open: Callable[[LoggerContext], Logger]
    module: str
    extra: str | None  # None: the module is a dependency of transformer-jax
    what: str


LOGGERS: Registry[LoggerSpec] = Registry("logger")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_installed(names: Iterable[str]) -> None:
    """Raises a ``ConfigError`` naming the extra to install for the first logger of ``names``
    whose package is missing (the command line exits 2 with it)."""
    names = tuple(names)
    for name in names:
        spec = LOGGERS.get(name)
        if not _installed(spec.module):
            extra = f"'transformer-jax[{spec.extra}]'" if spec.extra else "transformer-jax"
            off = "set train.log.wandb=none" if name == "wandb" else f"remove {name!r} from train.log.loggers"
            raise ConfigError(
                f"train.log: the {name!r} logger needs the {spec.module!r} package, which is not installed; "
                f"install it with `pip install -c constraints.txt {extra}` or {off}"
            )


def open_loggers(names: Iterable[str], ctx: LoggerContext) -> list[Logger]:
    """The loggers ``names`` opened in ``ctx.workdir`` (each checked with `check_installed` first)."""
    names = tuple(names)
    check_installed(names)
    return [LOGGERS.get(name).open(ctx) for name in names]


def scalars(name: str, value: Any) -> Iterator[tuple[str, float]]:
    """(tag, float) pairs: ``name`` itself, or ``name/i[/j...]`` for arrays; none for strings."""
    if isinstance(value, str):
        return
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        yield name, float(arr)
        return
    for index in np.ndindex(arr.shape):
        yield name + "".join(f"/{i}" for i in index), float(arr[index])


# JSON lines ---------------------------------------------------------------------------------


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


def encode_line(record: Mapping[str, Any]) -> str:
    return json.dumps({k: _encode(v) for k, v in record.items()}, allow_nan=False) + "\n"


def read_lines(path: epath.Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; a last line cut short by a crash is dropped."""
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


class JsonLines(Logger):
    """``workdir/metrics.jsonl``; on resume, records after ``resume_step`` are dropped first. A local
    file is appended to and flushed per record; a remote one (no appends) is rewritten whole, at
    most every ``REMOTE_FLUSH_S`` seconds and at `flush`/`close`."""

    def __init__(self, ctx: LoggerContext):
        self._path = path = ctx.workdir / METRICS_FILE
        kept = ""
        if path.exists() and (ctx.resume_step is not None or is_url(path)):
            records = read_lines(path)
            if ctx.resume_step is not None:
                records = [r for r in records if int(r.get("step", -1)) <= ctx.resume_step]
            kept = "".join(encode_line(r) for r in records)
            if not is_url(path):
                path.write_text(kept)
        self._remote: list[str] | None = [kept] if is_url(path) else None
        self._written = time.monotonic()
        self._file = None if is_url(path) else open(path, "a")  # noqa: SIM115 - closed by close()

    def write(self, record: Mapping[str, Any]) -> None:
        if self._remote is not None:
            self._remote.append(encode_line(record))
            if time.monotonic() - self._written >= REMOTE_FLUSH_S:
                self.flush()
            return
        assert self._file is not None
        self._file.write(encode_line(record))
        self._file.flush()

    def flush(self) -> None:
        if self._remote is not None:
            self._path.write_text("".join(self._remote))
            self._written = time.monotonic()
        elif self._file is not None:
            self._file.flush()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()


class TensorBoard(Logger):
    """Event files in ``workdir/tb/``; on resume, TensorBoard is told to purge the later steps."""

    def __init__(self, ctx: LoggerContext):
        import tensorboardX  # deferred: it pulls in protobuf
        from tensorboardX.record_writer import REGISTERED_FACTORIES

        where = ctx.workdir / TB_DIR
        scheme = os.fspath(where).split("://", 1)[0] if is_url(where) else None
        if scheme is not None and scheme not in REGISTERED_FACTORIES:
            fail("train.log.loggers", "tensorboard", f"tensorboardX cannot write {scheme}:// ({where})",
                 "remove 'tensorboard' from train.log.loggers or use a local --workdir")  # fmt: skip
        try:
            self._tb = tensorboardX.SummaryWriter(
                str(where), purge_step=None if ctx.resume_step is None else ctx.resume_step + 1, flush_secs=30
            )
        except ImportError as e:  # tensorboardX's gs:// writer needs google-cloud-storage, s3:// boto3
            raise ConfigError(
                f"train.log.loggers: the 'tensorboard' logger cannot write {where} here ({e}); install that "
                "package or remove 'tensorboard' from train.log.loggers"
            ) from None

    def write(self, record: Mapping[str, Any]) -> None:
        for name, value in record.items():
            if name not in ("step", "time"):
                for tag, scalar in scalars(name, value):
                    self._tb.add_scalar(tag, scalar, global_step=record["step"])

    def flush(self) -> None:
        self._tb.flush()

    def close(self) -> None:
        self._tb.close()


class WandB(Logger):
    """A Weights & Biases run: one per invocation (a resumed run starts a new one, named with its
    start step, in the same group), so every run's steps only increase."""

    def __init__(self, ctx: LoggerContext):
        import wandb

        settings = ctx.wandb or WandbConfig()
        start = "" if ctx.resume_step is None else f" (from step {ctx.resume_step})"
        self._run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            dir=None if os.environ.get("WANDB_DIR") or is_url(ctx.workdir) else str(ctx.workdir),  # wandb: local
            group=ctx.workdir.name if is_url(ctx.workdir) else ctx.workdir.resolve().name,
            name=f"{ctx.name}{start}",
            job_type="train",
            config=dict(ctx.run_config or {}),
        )

    def write(self, record: Mapping[str, Any]) -> None:
        values: dict[str, Any] = {}
        for name, value in record.items():
            if name in ("step", "time"):
                continue
            if isinstance(value, str):
                values[name] = value
            else:
                values.update(scalars(name, value))
        self._run.log(values, step=int(record["step"]))

    def flush(self) -> None:
        """Nothing to do: wandb streams each record to its own process."""

    def close(self) -> None:
        self._run.finish()


LOGGERS.register("jsonl", LoggerSpec(JsonLines, "json", None, f"one JSON object per record in {METRICS_FILE}"))
LOGGERS.register(
    "tensorboard",
    LoggerSpec(TensorBoard, "tensorboardX", None, f"TensorBoard event files in {TB_DIR}/ (viewer: extra tensorboard)"),
)
LOGGERS.register(
    "wandb",
    LoggerSpec(WandB, "wandb", "wandb", "a Weights & Biases run (WANDB_MODE=offline: no network)"),
)
