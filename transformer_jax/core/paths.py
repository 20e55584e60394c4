"""User paths: data, workdirs and checkpoints as ``etils.epath.Path``, so ``gs://`` works too.

A path a user gives (``--workdir``, ``data.dataset.path``, ``--output`` ...) goes through `user_path`
once: a local path is made absolute (``~`` expanded), so a stored config works from any directory;
a URL (``gs://bucket/run``, ``s3://...``) is kept exactly as given, never joined to the current
directory. Remote schemes open where the environment provides their backend (``gcsfs`` or
TensorFlow for ``gs://``, as for Orbax); a scheme epath does not know, or a backend that is not
installed, is a ``ConfigError`` naming the setting (`check_reachable`).

What needs a local file name (a Python experiment file, a Hugging Face model directory, a profiler
trace) asks for one with `require_local` (an error naming the setting) or `local_copy` (a remote
file copied to a temporary local file first).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from etils import epath

from transformer_jax.core.configlib import ConfigError

SCHEMES = ("gs", "s3", "az", "hf")  # the remote schemes etils.epath opens (besides local paths)


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return "://" in os.fspath(path)


def absolute(path: str) -> str:
    """A local path absolute (``~`` expanded); a URL (or "") as given, stripped of blanks."""
    path = path.strip()
    if not path or is_url(path):
        return path
    return os.path.abspath(os.path.expanduser(path))


def user_path(path: str | os.PathLike, setting: str = "path") -> epath.Path:
    """``path`` as an ``epath.Path``: local ones absolute, URLs as given. A scheme epath does not
    open (``file://``, ``http://``) is a ``ConfigError`` naming ``setting``."""
    if isinstance(path, epath.Path) and is_url(path):
        return path
    text = absolute(os.fspath(path))
    try:
        return epath.Path(text)
    except KeyError:
        scheme = text.split("://", 1)[0]
        raise ConfigError(
            f"{setting}={text!r}: the scheme {scheme}:// is not supported; give a local path or a URL "
            f"of {', '.join(s + '://' for s in SCHEMES)}"
        ) from None


def check_reachable(path: epath.Path, setting: str) -> None:
    """For a URL, asks its backend once whether ``path`` exists, so that a backend missing from this
    environment (``gcsfs``, TensorFlow) is a ``ConfigError`` naming ``setting``, not a traceback
    later; a local path is not checked here."""
    if not is_url(path):
        return
    scheme = os.fspath(path).split("://", 1)[0]
    try:
        path.exists()
    except (ImportError, NotImplementedError) as e:
        extra = "gcsfs (or tensorflow)" if scheme == "gs" else {"s3": "s3fs", "az": "adlfs"}.get(scheme, "fsspec")
        raise ConfigError(
            f"{setting}={os.fspath(path)!r}: this environment cannot open {scheme}:// paths ({e}); install "
            f"{extra} with its credentials, or give a local path"
        ) from None


def require_local(path: str | os.PathLike, setting: str, why: str) -> str:
    """``path`` made absolute when it is local; a URL is a ``ConfigError`` naming ``setting`` and
    saying ``why`` it must be local."""
    text = os.fspath(path)
    if is_url(text):
        raise ConfigError(f"{setting}={text!r}: {why}, so it must be a local path (copy to or from the URL separately)")
    return absolute(text)


@contextlib.contextmanager
def local_copy(path: epath.Path) -> Iterator[str]:
    """A local file name for ``path``: itself when local, else a temporary copy (removed after)."""
    if not is_url(path):
        yield os.fspath(path)
        return
    with tempfile.TemporaryDirectory(prefix="tj_remote_") as tmp:
        local = os.path.join(tmp, path.name)
        with path.open("rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst)
        yield local


@contextlib.contextmanager
def local_output(path: epath.Path) -> Iterator[str]:
    """A local file name to write ``path`` through: itself when local, else a temporary file copied
    to ``path`` when the block ends without an error."""
    if not is_url(path):
        yield os.fspath(path)
        return
    with tempfile.TemporaryDirectory(prefix="tj_remote_") as tmp:
        local = os.path.join(tmp, path.name)
        yield local
        with open(local, "rb") as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst)


def upload_tree(local: str, remote: epath.Path) -> None:
    """Copies the files under the local directory ``local`` to ``remote`` (same layout)."""
    for folder, _, files in os.walk(local):
        target = remote / os.path.relpath(folder, local) if folder != local else remote
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            with open(os.path.join(folder, name), "rb") as src, (target / name).open("wb") as dst:
                shutil.copyfileobj(src, dst)
