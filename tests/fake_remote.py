"""A fake ``gs://`` for tests: epath's backend for the scheme swapped for one that keeps
``gs://bucket/x`` under a local root and, like Cloud Storage, cannot append to a file.

Code that opens a URL with ``open``/``os``/``pathlib`` instead of ``epath`` does not reach the
root: it fails, or leaves a ``gs:`` folder in the current directory, which `fake_gs` checks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from etils.epath import backend, gpath

PREFIX = "gs://"


class FakeGcs(backend.Backend):
    """``gs://...`` stored under ``root``; append mode refused, as Cloud Storage refuses it."""

    def __init__(self, root: Path):
        self.root = root
        self.os = backend.os_backend

    def local(self, path) -> str:
        text = os.fspath(path)
        assert text.startswith(PREFIX), f"the fake gs:// backend got a non-gs path {text!r}"
        return str(self.root / text[len(PREFIX) :])

    def remote(self, local) -> str:
        return PREFIX + os.path.relpath(os.fspath(local), self.root)

    def open(self, path, mode):
        if "a" in mode or "+" in mode:
            raise NotImplementedError(f"fake gs://: mode {mode!r} is not supported (objects cannot be appended to)")
        return self.os.open(self.local(path), mode)

    def exists(self, path):
        return self.os.exists(self.local(path))

    def isdir(self, path):
        return self.os.isdir(self.local(path))

    def listdir(self, path):
        return self.os.listdir(self.local(path))

    def glob(self, path):
        return [self.remote(p) for p in self.os.glob(self.local(path))]

    def walk(self, top, *, top_down=True, on_error=None):
        for folder, dirs, files in self.os.walk(self.local(top), top_down=top_down, on_error=on_error):
            yield self.remote(folder), dirs, files

    def makedirs(self, path, *, exist_ok=False, mode=None):
        self.os.makedirs(self.local(path), exist_ok=exist_ok)

    def mkdir(self, path, *, exist_ok=False, mode=None):
        self.os.mkdir(self.local(path), exist_ok=exist_ok)

    def rmtree(self, path):
        self.os.rmtree(self.local(path))

    def remove(self, path):
        self.os.remove(self.local(path))

    def rename(self, path, dst):
        self.os.rename(self.local(path), self.local(dst))

    def replace(self, path, dst):
        self.os.replace(self.local(path), self.local(dst))

    def copy(self, path, dst, overwrite):
        self.os.copy(self.local(path), self.local(dst), overwrite=overwrite)

    def stat(self, path):
        return self.os.stat(self.local(path))


class MissingBackend:
    """``gs://`` in an environment without its backend: every call fails as fsspec does without gcsfs."""

    def __getattribute__(self, name):
        def missing(*args, **kwargs):
            raise ImportError("Please install gcsfs to access Google Storage")

        return missing


@contextlib.contextmanager
def no_gs_backend() -> Iterator[None]:
    """``gs://`` with no backend installed (whatever this environment has)."""
    with (
        mock.patch.dict(gpath._PREFIX_TO_BACKEND, {"gs": MissingBackend()}),  # pyright: ignore[reportPrivateUsage]
        mock.patch.object(gpath, "_is_tf_installed", lambda: False),
    ):
        yield


@contextlib.contextmanager
def fake_gs(root: Path, cwd: Path | None = None) -> Iterator[FakeGcs]:
    """``gs://`` served from ``root`` while inside; on leaving, ``cwd`` (if given) must hold no
    ``gs:`` folder, the mark of a URL opened as a local path."""
    fake = FakeGcs(root)
    root.mkdir(parents=True, exist_ok=True)
    with (
        mock.patch.dict(gpath._PREFIX_TO_BACKEND, {"gs": fake}),  # pyright: ignore[reportPrivateUsage]
        mock.patch.object(gpath, "_is_tf_installed", lambda: False),  # TensorFlow would take gs:// over
    ):
        yield fake
    if cwd is not None:
        leaked = sorted(str(p) for p in cwd.rglob("gs:*"))
        assert not leaked, f"a gs:// URL was opened as a local path: {leaked}"
