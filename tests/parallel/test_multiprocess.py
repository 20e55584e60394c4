"""Two processes on 127.0.0.1 (2 CPU devices each) train like one process with 4 devices; when one
process dies, the other stops with an error within a bounded time instead of hanging."""

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
SETS = ["train.batch_size=8", "train.steps=3", "train.eval_every=3", "train.checkpoint_every=3"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env["TRANSFORMER_JAX_HEARTBEAT_S"] = "10"
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


def test_surviving_process_exits_when_its_peer_dies(tmp_path):
    port = _port()
    sets = [
        "train.batch_size=8",
        "train.steps=100000",
        "train.eval_every=100000",
        "train.checkpoint_every=100000",
        "train.optim.decay_steps=100000",
    ]
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
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.time() + 300
    while time.time() < deadline and not (tmp_path / "run" / "metrics.jsonl").exists():
        time.sleep(0.5)
    assert (tmp_path / "run" / "metrics.jsonl").exists(), "training never started"
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    start = time.time()
    try:
        out, _ = procs[0].communicate(timeout=180)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        pytest.fail("process 0 hung after its peer died")
    assert procs[0].returncode != 0
    assert time.time() - start < 180
    assert any(word in out.lower() for word in ("heartbeat", "coordination", "unavailable", "peer", "failed")), out[
        -3000:
    ]
