"""Helpers shared by the command modules: common arguments, workdir checks, quiet logs, short warnings."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path

from transformer_jax.core.configlib import ConfigError


def add_run_args(p, *, config: bool, restore: bool = True, workdir_required: bool = True) -> None:
    """--config (experiment file), --workdir, --set KEY=VALUE ... (repeatable), --restore-step N."""
    if config:
        p.add_argument("--config", required=True, help="experiment file, e.g. experiments/shakespeare_char.py")
    p.add_argument("--workdir", required=workdir_required, help="run directory (checkpoints, metrics, tokenizer)")
    p.add_argument(
        "--set",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override config fields, e.g. train.steps=500 model.dims.n_layers=8 (repeatable; a later key wins)",
    )
    if restore:
        p.add_argument(
            "--restore-step",
            type=int,
            default=None,
            metavar="N",
            help="use the checkpoint of step N instead of the latest one",
        )


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def refuse_unread_options(mode: str, args, options: tuple[str, ...], reads: tuple[str, ...]) -> None:
    """An option of ``options`` given on ``args`` (not None) that ``mode`` does not read is an error."""
    unread = [_flag(o) for o in options if getattr(args, o) is not None and o not in reads]
    if unread:
        raise ConfigError(
            f"{mode} does not read {', '.join(unread)}; it reads {', '.join(map(_flag, reads)) or 'none of these'}"
        )


def check_workdir(path: str, *, create: bool, writable: bool = False) -> None:
    """A usable run directory: a directory (made when ``create``), writable when ``create``. A
    ``gs://`` (or other epath) URL is checked through its backend: one missing here is an error.
    ``writable`` without ``create``: a local directory that could be made and written, checked
    without making it (its nearest existing parent is a writable directory)."""
    from transformer_jax.core.paths import check_reachable, is_url, user_path

    where = user_path(path, "--workdir")
    check_reachable(where, "--workdir")
    if where.exists() and not where.is_dir():
        raise ConfigError(f"--workdir {path} is a file, not a directory; give a directory for the run")
    if writable and not create and not is_url(where):
        _check_could_write(path, Path(str(where)))
    if not create:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--workdir {path} cannot be created: {e.strerror or e}; choose a writable place") from None
    if not is_url(where) and not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir {path} is not writable; choose a writable directory")


def _check_could_write(path: str, where: Path) -> None:
    parent = next(p for p in (where, *where.parents) if p.exists())
    if not parent.is_dir():
        raise ConfigError(f"--workdir {path} cannot be created: {parent} is a file; choose a writable place")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir {path} is not writable ({parent}); choose a writable directory")


_SHOWN: set[tuple[str, type]] = set()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Each warning once per process (whatever filters a library sets); our own as one short line,
    everyone else's as Python prints them."""
    if (str(message), category) in _SHOWN:
        return
    _SHOWN.add((str(message), category))
    if "transformer_jax" in str(filename) or category.__module__.startswith("transformer_jax"):
        print(f"warning: {message}", file=file or sys.stderr, flush=True)
    else:
        print(warnings.formatwarning(message, category, filename, lineno, line), file=file or sys.stderr, end="")


def quiet():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Sharding info not provided.*")
    warnings.showwarning = _show_warning
    with contextlib.suppress(ImportError):
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in ("absl", "orbax", "jax", "grain", "tensorflow_datasets"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Reading only a checkpoint's metadata is intended; Orbax warns about the other items.
    logging.getLogger("absl").addFilter(lambda record: "could not be restored" not in record.getMessage())
