"""One writer per workdir: a second trainer is refused naming the holder; a stale lock (a dead PID
on this host) is taken over with a warning; a lock from another host is never taken over; readers
(eval, sample) never lock; the lock is released when training ends."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import child_env, cli, train, train_cmd
from transformer_jax.train.lock import LOCK_FILE, WorkdirLock, WorkdirLockedError


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_refuses_a_live_holder_and_names_it(tmp_path):
    with WorkdirLock(str(tmp_path)):
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(WorkdirLockedError) as err:
            WorkdirLock(str(tmp_path)).acquire()
        assert f"PID {os.getpid()} on host {socket.gethostname()!r}" in str(err.value)
    assert not (tmp_path / LOCK_FILE).exists()  # released


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, caplog):
    dead = _dead_pid()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "since": 0}))
    with WorkdirLock(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"taking over the stale lock {tmp_path / LOCK_FILE}" in caplog.text and f"PID {dead}" in caplog.text


def test_a_reused_pid_is_stale_too(tmp_path):
    """Our own PID with another start time: the lock's process is gone, the number was reused."""
    stale = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": "1", "since": 0}
    (tmp_path / LOCK_FILE).write_text(json.dumps(stale))
    with WorkdirLock(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["start_time"] != "1"


def test_a_lock_from_another_host_is_never_taken_over(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": time.time()}))
    with pytest.raises(WorkdirLockedError, match=r"PID 1 on host 'elsewhere'.*delete"):
        WorkdirLock(str(tmp_path)).acquire()


def test_disabled_lock_does_nothing(tmp_path):
    with WorkdirLock(str(tmp_path), enabled=False):
        assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.slow
def test_second_trainer_is_refused_and_readers_never_lock(tmp_path):
    workdir = tmp_path / "run"
    summary, _ = train(workdir, "train.steps=2")  # a finished run to read while the lock is held
    assert not (workdir / LOCK_FILE).exists()  # train released it on the way out
    first = subprocess.Popen(
        train_cmd(workdir, "train.steps=2000", "train.checkpoint.every=1000", "train.eval.every=1000",
                  "train.optim.schedule.decay_steps=2000"),
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 300
        while not (workdir / LOCK_FILE).exists() or "pid" not in (workdir / LOCK_FILE).read_text():
            assert first.poll() is None and time.time() < deadline, first.stdout.read()
            time.sleep(0.05)
        second = cli(*train_cmd(workdir, "train.steps=3")[3:], check=False)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"held by a running trainer, PID {first.pid} on host {socket.gethostname()!r}" in second.stderr
        assert cli("eval", "--workdir", str(workdir), "--max-batches", "1").returncode == 0
        assert cli("sample", "--workdir", str(workdir), "--max-new-tokens", "3").returncode == 0
    finally:
        first.kill()
        first.wait()
    assert summary["step"] == 2
