"""Checkpoints that cannot be used or written: a different architecture gives a list of the
mismatched parameters; a full disk gives a clear error and the previous checkpoint stays intact; a
damaged newest checkpoint is named, set aside, and training continues from the one before it."""

import errno
import json
import os
import re
import shutil
import subprocess

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.cli_helpers import cli, train, train_cmd
from transformer_jax.train.checkpoint import CheckpointError
from transformer_jax.train.experiment import load_experiment, workdir_config
from transformer_jax.train.loop import train as train_in_process
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow
TINY = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")
SHORT = ["train.steps=2", "train.checkpoint_every=2", "train.eval_every=1000"]


def _params(workdir):
    run, _ = setup(workdir_config(str(workdir)), str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get(run.state.params), int(run.state.step)


def test_other_architecture_lists_mismatched_parameters(tmp_path):
    train(tmp_path / "run", *SHORT)
    summary, proc = train(
        tmp_path / "run", *SHORT, "model.n_layers=3", "model.d_model=48", "train.steps=4", check=False
    )
    assert proc.returncode == 2 and summary is None
    err = proc.stderr
    assert "does not fit this model" in err and "Traceback" not in err
    assert "layers.layers.2.self_attn.q.kernel: checkpoint has no such parameter" in err
    assert "(68, 32) vs model (68, 48)" in err  # the embedding table, checkpoint vs model shapes


def _tmpfs(path, size_kb) -> bool:
    path.mkdir()
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def test_disk_full_while_saving_keeps_previous_checkpoint(tmp_path, monkeypatch):
    first = tmp_path / "first"
    train(first, *SHORT)
    before, _ = _params(first)
    used_kb = sum(os.stat(os.path.join(d, f)).st_blocks // 2 + 4 for d, _, fs in os.walk(first) for f in fs)
    used_kb += 4 * sum(len(ds) for _, ds, _ in os.walk(first))
    disk = tmp_path / "disk"
    real_disk = _tmpfs(disk, used_kb + 128)  # room for metrics, not for another checkpoint (~380 KB)
    workdir = disk / "run" if real_disk else tmp_path / "run"
    try:
        shutil.copytree(first, workdir)
        if not real_disk:  # no permission to mount a small filesystem: fail the write the same way

            def full(*args, **kwargs):
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(ocp.CheckpointManager, "save", full)
        cfg = load_experiment(TINY, SHORT + ["train.steps=40", "train.checkpoint_every=2"])
        with pytest.raises(CheckpointError, match="no space left on device") as err:
            train_in_process(cfg, str(workdir), devices=jax.devices()[:1])
        # How many saves fit before the disk is full varies (compression, the old checkpoint's
        # removal); whichever was the last complete one must be named, intact and restorable.
        intact = re.search(r"the last complete checkpoint \(step (\d+)\) is intact", str(err.value))
        assert intact, str(err.value)
        monkeypatch.undo()
        after, step = _params(workdir)
        assert step == int(intact.group(1)) and step < 40
        if step == 2:
            for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
                np.testing.assert_array_equal(a, b)
    finally:
        if real_disk:
            subprocess.run(["umount", str(disk)], capture_output=True)


def _damage_meta(workdir, step):
    path = workdir / "checkpoints" / str(step) / "meta" / "metadata"
    path.write_text(path.read_text()[:92])  # a torn write: "Unterminated string ..."


def _damage_state(workdir, step):
    for f in (workdir / "checkpoints" / str(step) / "state").rglob("d/*"):
        f.write_bytes(b"not an array")


@pytest.mark.parametrize("damage,part", [(_damage_meta, "metadata (meta/)"), (_damage_state, "state")])
def test_damaged_newest_checkpoint_is_skipped_and_named_and_the_run_continues_exactly(tmp_path, damage, part):
    straight, _ = train(tmp_path / "straight", "train.steps=6")
    workdir = tmp_path / "run"
    train(workdir, "train.steps=4")  # checkpoints at steps 2 and 4
    damage(workdir, 4)
    summary, proc = train(workdir, "train.steps=6")
    ckpt = workdir / "checkpoints" / "4"
    assert f"checkpoint {ckpt} (step 4) cannot be restored: its {part}" in proc.stderr
    assert f"set it aside as {ckpt}.damaged" in proc.stderr and "restored step 2" in proc.stderr
    assert "resuming at step 2" in proc.stdout and summary["step"] == 6
    assert (workdir / "checkpoints" / "4.damaged").is_dir()  # kept for inspection, never overwritten
    (a, _), (b, _) = _params(workdir), _params(tmp_path / "straight")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)  # resumed from step 2 == never interrupted
    assert straight["step"] == 6


def test_readers_name_the_damaged_checkpoint_and_the_steps_and_take_restore_step(tmp_path):
    workdir = tmp_path / "run"
    train(workdir, "train.steps=4")
    _damage_meta(workdir, 4)
    proc = cli("eval", "--workdir", str(workdir), "--max-batches", "1", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"checkpoint {workdir / 'checkpoints' / '4'} (step 4) cannot be restored" in proc.stderr
    assert "steps in" in proc.stderr and ": 2, 4 (choose one with --restore-step N)" in proc.stderr
    assert (workdir / "checkpoints" / "4").is_dir()  # readers change nothing
    ok = cli("eval", "--workdir", str(workdir), "--max-batches", "1", "--restore-step", "2")
    assert json.loads(ok.stdout.strip().splitlines()[-1])["step"] == 2
    missing = cli("eval", "--workdir", str(workdir), "--restore-step", "3", check=False)
    assert missing.returncode == 2 and "has no checkpoint of step 3; steps: 2, 4" in missing.stderr


def test_training_again_from_an_earlier_step_sets_the_later_checkpoints_aside(tmp_path):
    workdir = tmp_path / "run"
    train(workdir, "train.steps=4")  # checkpoints at steps 2 and 4
    proc = cli(*train_cmd(workdir, "train.steps=6")[3:], "--restore-step", "2")
    later = workdir / "checkpoints" / "4"
    assert f"--restore-step 2: set aside the later checkpoint of step 4 as {later}.superseded" in proc.stderr
    assert "resuming at step 2" in proc.stdout
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2", "4", "4.superseded", "6"]
