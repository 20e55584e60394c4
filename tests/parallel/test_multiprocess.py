"""Two processes on 127.0.0.1 (2 CPU devices each) train like one process with 4 devices; when one
process dies, the other stops with an error within a bounded time instead of hanging; saving the
latest and the best checkpoint at the same steps neither hangs nor fails."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from transformer_jax.train.experiment import workdir_config
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
EXPERIMENT = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")
HEARTBEAT_S = 10  # TRANSFORMER_JAX_HEARTBEAT_S of every process in these tests (see _env)
# The runtime notices the missing heartbeats within HEARTBEAT_S of the kill (the coordinator checks
# about every second); the margin covers that check, the error reaching the survivor and its abort.
EXIT_MARGIN_S = 5
SETS = ["train.batch_size=8", "train.steps=3", "train.eval.every=3", "train.checkpoint.every=3"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env["TRANSFORMER_JAX_HEARTBEAT_S"] = str(HEARTBEAT_S)
    return env


def _cmd(workdir, *extra, sets=SETS):
    return [
        sys.executable,
        "-m",
        "transformer_jax",
        "train",
        "--config",
        EXPERIMENT,
        "--workdir",
        str(workdir),
        "--sample-tokens",
        "0",
        *extra,
        "--set",
        *sets,
    ]


def _params(workdir):
    run, _ = setup(workdir_config(str(workdir)), str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get(run.state.params)


def test_two_processes_equal_one_process_with_four_devices(tmp_path):
    one = subprocess.run(
        _cmd(tmp_path / "one", "--local-devices", "4"), env=_env(), capture_output=True, text=True, timeout=600
    )
    assert one.returncode == 0, one.stderr[-3000:]
    port = _port()
    procs = [
        subprocess.Popen(
            _cmd(
                tmp_path / "two",
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--local-devices",
                "2",
            ),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    a = json.loads(one.stdout.strip().splitlines()[-1])
    b = json.loads(outs[0][0].strip().splitlines()[-1])
    assert "devices: 4" in outs[0][0] and b["step"] == a["step"] == 3
    np.testing.assert_allclose(b["train_loss"], a["train_loss"], rtol=1e-5)
    np.testing.assert_allclose(b["val_loss"], a["val_loss"], rtol=1e-5)
    assert '"step"' not in outs[1][0] and "model:" not in outs[1][0]  # only process 0 reports
    for x, y in zip(jax.tree.leaves(_params(tmp_path / "one")), jax.tree.leaves(_params(tmp_path / "two"))):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_surviving_process_exits_when_its_peer_dies(tmp_path):
    """docs/scaling.md: "a killed peer stops the survivor within the heartbeat timeout"."""
    port = _port()
    sets = [
        "train.batch_size=8",
        "train.steps=100000",
        "train.eval.every=100000",
        "train.checkpoint.every=100000",
        "train.optim.schedule.decay_steps=100000",
    ]
    with contextlib.ExitStack() as stack:
        # Output to files, so that a full pipe never blocks a process.
        logs = [stack.enter_context(open(tmp_path / f"process{i}.log", "w+")) for i in range(2)]
        procs = [
            subprocess.Popen(
                _cmd(
                    tmp_path / "run",
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    "2",
                    "--process-id",
                    str(i),
                    "--local-devices",
                    "2",
                    sets=sets,
                ),
                env=_env(),
                stdout=logs[i],
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]
        for p in procs:
            stack.callback(_kill, p)  # whatever happens below, no process outlives the test
        metrics = tmp_path / "run" / "metrics.jsonl"

        def training() -> bool:  # two steps logged: both processes are in the training loop
            return metrics.exists() and metrics.read_text().count("train/loss") >= 2

        deadline = time.time() + 300
        while time.time() < deadline and not training():
            assert procs[0].poll() is None and procs[1].poll() is None, "a process ended before training"
            time.sleep(0.2)
        assert training(), "training never started"
        procs[1].send_signal(signal.SIGKILL)
        killed = time.time()
        procs[1].wait()
        bound = HEARTBEAT_S + EXIT_MARGIN_S
        try:
            procs[0].wait(timeout=bound)
        except subprocess.TimeoutExpired:
            pytest.fail(f"process 0 still ran {bound} s after its peer was killed (heartbeat timeout {HEARTBEAT_S} s)")
        elapsed = time.time() - killed
        logs[0].seek(0)
        out = logs[0].read()
    assert elapsed <= bound, elapsed
    # JAX's coordination service reports the missing heartbeats and aborts the survivor (SIGABRT).
    assert procs[0].returncode == -signal.SIGABRT, (procs[0].returncode, out[-3000:])
    assert "The following tasks are unhealthy (stopped sending heartbeats):\n1\n" in out, out[-3000:]
    assert "Terminating process because the JAX distributed service detected fatal errors" in out, out[-3000:]


SAVE_TRIES = 1  # of 10 steps; before the fix 7 tries in 10 (of 8 steps) hung, 1 failed: bench/multihost_saves.py
SAVE_TIMEOUT_S = 90  # a try takes about 20 s; Orbax's own barrier timeout (300 s) would block far longer


def _start_pair(workdir, port, logs, sets):
    args = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--local-devices", "1"]
    return [
        subprocess.Popen(
            _cmd(workdir, *args, "--process-id", str(i), sets=sets),
            env=_env(),
            stdout=logs[i],
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]


def test_saving_latest_and_best_at_the_same_steps_neither_hangs_nor_fails(tmp_path):
    """Each step validates (a new best) and checkpoints: ``checkpoints/`` and ``best/`` are saved at
    the same steps by two Orbax managers, whose asynchronous multi-host saves must not overlap."""
    steps = 10
    sets = ["train.batch_size=8", f"train.steps={steps}", "train.eval.every=1", "train.eval.batches=1"]
    sets += ["train.checkpoint.every=1", f"train.optim.schedule.decay_steps={steps}", "train.optim.warmup_steps=1"]
    for n in range(SAVE_TRIES):
        workdir = tmp_path / f"try{n}"
        with contextlib.ExitStack() as stack:
            logs = [stack.enter_context(open(tmp_path / f"try{n}.process{i}.log", "w+")) for i in range(2)]
            procs = _start_pair(workdir, _port(), logs, sets)
            for p in procs:
                stack.callback(_kill, p)
            deadline = time.time() + SAVE_TIMEOUT_S
            try:
                for p in procs:
                    p.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            logs[0].seek(0)
            out = logs[0].read()
            codes = [p.poll() for p in procs]
        assert None not in codes, f"try {n}: hung (still running after {SAVE_TIMEOUT_S} s)\n{out[-3000:]}"
        assert codes == [0, 0], (n, codes, out[-3000:])
        assert str(steps) in os.listdir(workdir / "checkpoints") and os.listdir(workdir / "best"), os.listdir(workdir)
