"""End-to-end training: exact resume (bitwise), resume after SIGKILL, clear errors on bad input."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.cli_helpers import child_env as _env
from tests.cli_helpers import cli
from tests.cli_helpers import train as train_cli
from transformer_jax.core import configlib
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
HERE = os.path.dirname(__file__)
EXPERIMENT = os.path.join(HERE, "tiny_experiment.py")


def _cli(*args, check=True):
    return cli(*args, check=check)


def _train(workdir, *sets):
    return train_cli(workdir, *sets)


def _restored(workdir):
    saved = json.loads(pathlib.Path(workdir, "config.json").read_text())
    cfg = configlib.from_dict(type(load_experiment(EXPERIMENT)), saved)
    run, data_state = setup(cfg, str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get(run.state), data_state


def test_resume_is_bitwise_equal_to_uninterrupted(tmp_path):
    straight, _ = _train(tmp_path / "a", "train.steps=6")
    first, _ = _train(tmp_path / "b", "train.steps=3")
    resumed, proc = _train(tmp_path / "b", "train.steps=6")
    assert "resuming at step 3" in proc.stdout
    assert straight["step"] == resumed["step"] == 6
    a, data_a = _restored(tmp_path / "a")
    b, data_b = _restored(tmp_path / "b")
    assert data_a == data_b
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert straight["val_loss"] == resumed["val_loss"]


def test_sigkill_mid_run_resumes_from_last_checkpoint(tmp_path):
    workdir = tmp_path / "run"
    cmd = [
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
        "--set",
        "train.steps=400",
        "train.checkpoint_every=5",
        "train.eval_every=1000",
        "train.optim.decay_steps=400",
    ]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    ckpt_dir = workdir / "checkpoints"
    while time.time() < deadline:
        steps = [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if ckpt_dir.exists() else []
        if steps and max(steps) >= 10:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no checkpoint appeared: " + proc.stdout.read()[-3000:])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    complete = max(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())
    summary, out = _train(
        workdir,
        "train.steps=400",
        "train.checkpoint_every=5",
        "train.eval_every=1000",
        "train.optim.decay_steps=400",
        "train.steps=12",
    )
    resumed_at = int(out.stdout.split("resuming at step ")[1].split()[0])
    assert resumed_at >= 10 and resumed_at <= complete + 5, (resumed_at, complete)
    assert resumed_at % 5 == 0
    assert summary["step"] == max(12, resumed_at)


def test_missing_corpus_file_is_named(tmp_path):
    proc = _cli(
        "train",
        "--config",
        EXPERIMENT,
        "--workdir",
        str(tmp_path / "r"),
        "--set",
        "data.dataset=text",
        f"data.path={tmp_path}/nope.txt",
        check=False,
    )
    assert proc.returncode != 0
    assert "nope.txt" in proc.stderr


def test_unknown_set_key_suggests_names(tmp_path):
    proc = _cli("train", "--config", EXPERIMENT, "--workdir", str(tmp_path / "r"), "--set", "train.step=5", check=False)
    assert proc.returncode == 2
    assert "unknown config key 'train.step'" in proc.stderr and "train.steps" in proc.stderr
