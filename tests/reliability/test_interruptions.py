"""Interruptions lose nothing: SIGTERM/SIGINT save and exit 0, and the rerun continues exactly;
SIGKILL in the middle of an asynchronous checkpoint write leaves a partial checkpoint that the next
start ignores (with a warning) while resuming from the newest complete one."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from tests.cli_helpers import child_env, train, train_cmd
from transformer_jax.train.experiment import workdir_config
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
LONG = [
    "train.steps=120",
    "train.checkpoint.every=1000",
    "train.eval.every=1000",
    "train.optim.schedule.decay_steps=120",
]


def final_state(workdir):
    run, data_state = setup(workdir_config(str(workdir)), str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get((run.state.params, run.state.opt_state, run.state.step)), data_state


def assert_same_run(a, b):
    (sa, da), (sb, db) = final_state(a), final_state(b)
    assert da == db
    for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def wait_for_step(workdir, step, proc, timeout=300):
    metrics = workdir / "metrics.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"training ended early: {proc.stdout.read()[-3000:]}")
        if metrics.exists() and metrics.read_text().count("train/loss") >= step:
            return
        time.sleep(0.05)
    pytest.fail("training made no progress")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("straight") / "run"
    summary, _ = train(workdir, *LONG)
    assert summary["step"] == 120
    return workdir


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_exits_zero_and_rerun_continues_exactly(tmp_path, uninterrupted, sig):
    workdir = tmp_path / "run"
    proc = subprocess.Popen(
        train_cmd(workdir, *LONG), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    wait_for_step(workdir, 5, proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert f"received {sig.name}" in out
    stopped_at = int(out.strip().splitlines()[-1].split('"step": ')[1].split(",")[0])
    assert 5 <= stopped_at < 120
    assert (workdir / "checkpoints" / str(stopped_at)).is_dir()
    summary, proc = train(workdir, *LONG)
    assert f"resuming at step {stopped_at}" in proc.stdout and summary["step"] == 120
    assert_same_run(uninterrupted, workdir)


KILL_DURING_SAVE = textwrap.dedent("""
    import os, signal, sys
    from transformer_jax.train import checkpoint
    original = checkpoint.Checkpoints.save
    def save(self, step, *args, **kwargs):
        written = original(self, step, *args, **kwargs)
        if step == int(os.environ["KILL_AT_SAVE"]):
            os.kill(os.getpid(), signal.SIGKILL)  # the asynchronous write has only just begun
        return written
    checkpoint.Checkpoints.save = save
    from transformer_jax.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigkill_during_async_save_resumes_from_newest_complete(tmp_path):
    sets = ["train.steps=8", "train.checkpoint.every=2", "train.eval.every=1000", "train.optim.schedule.decay_steps=8"]
    straight = tmp_path / "straight"
    train(straight, *sets)
    workdir = tmp_path / "run"
    script = tmp_path / "kill_during_save.py"
    script.write_text(KILL_DURING_SAVE)
    cmd = [sys.executable, str(script)] + train_cmd(workdir, *sets)[3:]
    proc = subprocess.run(cmd, env=child_env(KILL_AT_SAVE="4"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    leftovers = [n for n in os.listdir(workdir / "checkpoints") if "tmp" in n]
    assert leftovers, "expected the interrupted save to leave a partial checkpoint behind"
    summary, proc = train(workdir, *sets)
    assert "incomplete checkpoint" in proc.stderr and "resuming at step 2" in proc.stdout
    assert summary["step"] == 8
    assert not [n for n in os.listdir(workdir / "checkpoints") if "tmp" in n]
    assert_same_run(straight, workdir)
