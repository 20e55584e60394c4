"""A checkpoint saved on 8 devices as data=2 x fsdp=4 restores on 4 devices (data=4) and on 1
device, and training continues with the same results."""

import os
import shutil

import jax
import numpy as np
import pytest

from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.loop import train
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
EXPERIMENT = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")
BASE = [
    "model.dims.d_model=64",
    "model.dims.n_heads=8",
    "model.dims.d_ff=128",
    "train.batch_size=8",
    "train.eval.every=100",
    "train.checkpoint.every=2",
    "train.optim.schedule.decay_steps=6",
]


def _cfg(steps, mesh):
    return load_experiment(EXPERIMENT, BASE + [f"train.steps={steps}"] + mesh)


def _params(workdir):
    run, _ = setup(_cfg(4, ["mesh.data=1"]), str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get(run.state.params), int(run.state.step)


def test_restore_on_a_different_mesh_continues_equally(tmp_path):
    saved = tmp_path / "saved"
    train(_cfg(2, ["mesh.data=2", "mesh.fsdp=4"]), str(saved), devices=jax.devices())
    for name in ("four", "one"):
        shutil.copytree(saved, tmp_path / name)
    results = {
        "eight": train(_cfg(4, ["mesh.data=2", "mesh.fsdp=4"]), str(saved), devices=jax.devices()),
        "four": train(_cfg(4, ["mesh.data=4"]), str(tmp_path / "four"), devices=jax.devices()[:4]),
        "one": train(_cfg(4, ["mesh.data=1"]), str(tmp_path / "one"), devices=jax.devices()[:1]),
    }
    for name, summary in results.items():
        assert summary["step"] == 4, name
        np.testing.assert_allclose(summary["train_loss"], results["eight"]["train_loss"], rtol=1e-5)
    reference, step = _params(saved)
    assert step == 4
    for name in ("four", "one"):
        params, step = _params(tmp_path / name)
        assert step == 4
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(reference)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
