"""End-to-end training: exact resume (bitwise), resume after SIGKILL, clear errors on bad input."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from tests.cli_helpers import child_env as _env
from tests.cli_helpers import cli, train_cmd
from tests.cli_helpers import train as train_cli
from transformer_jax.core import configlib
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.lock import LOCK_FILE
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
HERE = os.path.dirname(__file__)
EXPERIMENT = os.path.join(HERE, "tiny_experiment.py")


def _cli(*args, check=True):
    return cli(*args, check=check)


def _train(workdir, *sets) -> tuple[dict, subprocess.CompletedProcess]:
    summary, proc = train_cli(workdir, *sets)
    assert summary is not None  # train_cli checks the exit status
    return summary, proc


def _restored(workdir):
    saved = json.loads(pathlib.Path(workdir, "config.json").read_text())
    cfg = configlib.from_dict(type(load_experiment(EXPERIMENT)), saved)
    run, data_state = setup(cfg, str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get(run.state), data_state


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(summary, workdir) of six steps in one go (checkpoints at 2, 4, 6; validation at 3, 6)."""
    workdir = tmp_path_factory.mktemp("straight") / "run"
    summary, _ = _train(workdir, "train.steps=6")
    assert summary["step"] == 6
    return summary, workdir


def _assert_same_state(a, b):
    """The restored checkpoints of workdirs ``a`` and ``b`` are bitwise equal (params, optimizer
    and model state, step, skip counters), and so are their data positions."""
    (state_a, data_a), (state_b, data_b) = _restored(a), _restored(b)
    assert data_a == data_b
    leaves_a, leaves_b = jax.tree_util.tree_flatten_with_path(state_a)[0], jax.tree.leaves(state_b)
    assert len(leaves_a) == len(leaves_b)
    for (path, x), y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


def test_resume_is_bitwise_equal_to_uninterrupted(tmp_path, uninterrupted):
    straight, straight_dir = uninterrupted
    _train(tmp_path / "b", "train.steps=3")
    assert not (tmp_path / "b" / LOCK_FILE).exists()  # released when training ends
    resumed, proc = _train(tmp_path / "b", "train.steps=6")
    assert "resuming at step 3" in proc.stdout
    assert "stale lock" not in proc.stderr and not (tmp_path / "b" / LOCK_FILE).exists()
    assert straight["step"] == resumed["step"] == 6
    _assert_same_state(straight_dir, tmp_path / "b")
    assert straight["val_loss"] == resumed["val_loss"]


def test_training_a_finished_run_again_takes_no_step_and_rewrites_nothing(tmp_path, uninterrupted):
    """What notebooks rely on to resume a run stopped part way: `train` on a finished workdir."""
    straight, straight_dir = uninterrupted
    workdir = tmp_path / "again"
    shutil.copytree(straight_dir, workdir)
    ckpts = workdir / "checkpoints"
    before = {p: p.stat().st_mtime_ns for p in ckpts.rglob("*") if p.is_file()}
    again, proc = _train(workdir, "train.steps=6")
    assert again["step"] == 6 and "resuming at step 6" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in ckpts.rglob("*") if p.is_file()} == before
    _assert_same_state(straight_dir, workdir)


# The training command, stopped for good (sleeping, to be SIGKILLed) right after step PAUSE_AT_STEP
# has run, once every checkpoint it wrote before that step is complete on disk.
PAUSE_AFTER_STEP = textwrap.dedent("""
    import os, sys, time
    import jax
    from transformer_jax.train import actions
    original = actions.Log.after_step
    def after_step(self, ctl, view):
        original(self, ctl, view)
        if view.step == int(os.environ["PAUSE_AT_STEP"]):
            jax.block_until_ready(view.state)
            ctl.wait_for_saves()
            open(os.environ["PAUSED_FILE"], "w").close()
            time.sleep(600)
    actions.Log.after_step = after_step
    from transformer_jax.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigkill_mid_run_resumes_from_last_checkpoint(tmp_path, uninterrupted):
    straight, straight_dir = uninterrupted
    workdir = tmp_path / "run"
    script, paused = tmp_path / "pause_after_step.py", tmp_path / "paused"
    script.write_text(PAUSE_AFTER_STEP)
    cmd = [sys.executable, str(script)] + train_cmd(workdir, "train.steps=6")[3:]
    env = _env(PAUSE_AT_STEP="3", PAUSED_FILE=str(paused))
    with open(tmp_path / "killed.log", "w+") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        while not paused.exists():
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                log.seek(0)
                pytest.fail("training never reached step 3: " + log.read()[-3000:])
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # after step 3, with the checkpoint of step 2 complete
        assert proc.wait(timeout=60) == -signal.SIGKILL
    # Exactly the one complete checkpoint and no partial one; step 3 is lost.
    assert sorted(os.listdir(workdir / "checkpoints")) == ["2"]
    summary, out = _train(workdir, "train.steps=6")
    resumed_at = int(out.stdout.split("resuming at step ")[1].split()[0])
    assert resumed_at == 2, out.stdout[-2000:]
    assert summary["step"] == 6  # steps 3..6 trained after the resume
    assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "4", "6"]
    _assert_same_state(straight_dir, workdir)  # == six steps never interrupted, bitwise
    assert summary["val_loss"] == straight["val_loss"]


def test_missing_corpus_file_is_named(tmp_path):
    proc = _cli(
        "train",
        "--config",
        EXPERIMENT,
        "--workdir",
        str(tmp_path / "r"),
        "--set",
        "data.dataset=text",
        f"data.dataset.path={tmp_path}/nope.txt",
        check=False,
    )
    assert proc.returncode != 0
    assert "nope.txt" in proc.stderr


def test_unknown_set_key_suggests_names(tmp_path):
    proc = _cli("train", "--config", EXPERIMENT, "--workdir", str(tmp_path / "r"), "--set", "train.step=5", check=False)
    assert proc.returncode == 2
    assert "unknown config key 'train.step'" in proc.stderr and "train.steps" in proc.stderr


def test_resuming_under_changed_settings_names_each_one(tmp_path, uninterrupted):
    """The steps before the checkpoint used the saved settings: the user is told which changed."""
    _, straight_dir = uninterrupted
    workdir = tmp_path / "changed"
    shutil.copytree(straight_dir, workdir)
    for later in ("4", "6"):
        shutil.rmtree(workdir / "checkpoints" / later)
    _, proc = _train(workdir, "train.steps=4", "train.optim.lr=0.0005", "train.log.every=2")
    assert "resuming at step 2" in proc.stdout
    assert "2 setting(s) changed" in proc.stderr and "train.steps 6 -> 4" in proc.stderr
    assert "train.optim.lr 0.003 -> 0.0005" in proc.stderr and "train.log.every" not in proc.stderr
    _, proc = _train(workdir, "train.steps=4", "train.optim.lr=0.0005")  # finished, same settings
    assert "changed since it was saved" not in proc.stderr
