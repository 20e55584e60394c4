"""One writer per workdir: ``train`` holds ``WORKDIR/train.lock`` (host, PID, start time) while it runs.

A second trainer on the same workdir is refused with a message naming the holder. A lock left by
a process that no longer runs on this host (killed, crashed) is stale: it is taken over with a
warning. A lock held from another host cannot be checked from here and is never taken over; remove
the file by hand once that run is gone. Readers (``eval``, ``sample``) never lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time

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
        self.path = os.path.join(workdir, LOCK_FILE)
        self.enabled = enabled
        self.held = False

    def _me(self) -> dict:
        pid = os.getpid()
        return {"host": socket.gethostname(), "pid": pid, "start_time": _start_time(pid), "since": time.time()}

    def _read(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # half-written or unreadable: judged by its age below

    def acquire(self) -> None:
        if not self.enabled:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(self._me(), f)
            self.held = True
            return
        raise WorkdirLockedError(f"could not take {self.path}: another process keeps creating it")

    def _take_over_if_stale(self) -> None:
        holder = self._read()
        if holder is None:
            return
        if not holder:
            age = time.time() - os.path.getmtime(self.path)
            if age < 10:  # a trainer is writing it right now
                raise WorkdirLockedError(f"{self.path} is being written by another trainer; try again")
            holder = {"pid": "?", "host": "?"}
        elif holder.get("host") != socket.gethostname():
            raise WorkdirLockedError(
                f"the workdir {os.path.dirname(self.path)} is held by a trainer, {_holder_text(holder)}: one "
                f"writer per workdir. Wait for it, use another --workdir, or, if that run is gone, delete "
                f"{self.path}"
            )
        elif _alive(int(holder["pid"]), holder.get("start_time")):
            raise WorkdirLockedError(
                f"the workdir {os.path.dirname(self.path)} is held by a running trainer, {_holder_text(holder)}: "
                f"one writer per workdir. Wait for it to finish, stop it, or use another --workdir"
            )
        log.warning("taking over the stale lock %s of %s, which no longer runs", self.path, _holder_text(holder))
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def release(self) -> None:
        if not self.held:
            return
        holder = self._read()
        if holder and holder.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        self.held = False

    def __enter__(self) -> WorkdirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
