"""One writer per workdir: ``train`` holds ``WORKDIR/train.lock`` (host, PID, start time) while it runs.

A second trainer on the same workdir is refused with a message naming the holder. A lock left by
a process that no longer runs on this host (killed, crashed) is stale: it is taken over with a
warning. A lock held from another host cannot be checked from here and is never taken over; remove
the file by hand once that run is gone. Readers (``eval``, ``sample``) never lock.

In a ``gs://`` (or other remote) workdir the lock is an object written after checking that none
exists: not atomic as a local ``O_EXCL`` create is, but it still refuses a second trainer started
after the first one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time

from etils import epath

from transformer_jax.core.paths import is_url, user_path

log = logging.getLogger(__name__)

LOCK_FILE = "train.lock"


class WorkdirLockedError(RuntimeError):
    """Another live trainer holds the workdir."""


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), to tell a reused PID apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start_time: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    current = _start_time(pid)
    return start_time is None or current is None or current == start_time


def _holder_text(holder: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
    return f"PID {holder.get('pid')} on host {holder.get('host')!r} (since {since})"


class WorkdirLock:
    """``with WorkdirLock(workdir):`` holds the workdir for one training process (``enabled=False``:
    a no-op, for the processes other than 0 of a multi-process run)."""

    def __init__(self, workdir: str, *, enabled: bool = True):
        self.path: epath.Path = user_path(workdir, "--workdir") / LOCK_FILE
        self.enabled = enabled
        self.held = False

    def _me(self) -> dict:
        pid = os.getpid()
        return {"host": socket.gethostname(), "pid": pid, "start_time": _start_time(pid), "since": time.time()}

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # half-written or unreadable: judged by its age below

    def acquire(self) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                self._create(json.dumps(self._me()))
            except FileExistsError:
                self._take_over_if_stale()
                continue
            self.held = True
            return
        raise WorkdirLockedError(f"could not take {self.path}: another process keeps creating it")

    def _create(self, text: str) -> None:
        """Writes the lock file, raising FileExistsError when it exists (atomically when local)."""
        if is_url(self.path):
            if self.path.exists():
                raise FileExistsError(self.path)
            self.path.write_text(text)
            return
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    def _take_over_if_stale(self) -> None:
        holder = self._read()
        if holder is None:
            return
        if not holder:
            age = time.time() - self.path.stat().mtime
            if age < 10:  # a trainer is writing it right now
                raise WorkdirLockedError(f"{self.path} is being written by another trainer; try again")
            holder = {"pid": "?", "host": "?"}
        elif holder.get("host") != socket.gethostname():
            raise WorkdirLockedError(
                f"the workdir {self.path.parent} is held by a trainer, {_holder_text(holder)}: one "
                f"writer per workdir. Wait for it, use another --workdir, or, if that run is gone, delete "
                f"{self.path}"
            )
        elif _alive(int(holder["pid"]), holder.get("start_time")):
            raise WorkdirLockedError(
                f"the workdir {self.path.parent} is held by a running trainer, {_holder_text(holder)}: "
                f"one writer per workdir. Wait for it to finish, stop it, or use another --workdir"
            )
        log.warning("taking over the stale lock %s of %s, which no longer runs", self.path, _holder_text(holder))
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def release(self) -> None:
        if not self.held:
            return
        holder = self._read()
        if holder and holder.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.held = False

    def __enter__(self) -> WorkdirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
