"""What a run reports about itself: the final tokens/s of a resumed run is measured on its own
steps; a fine-tune says it starts from the pretrained weights; a refused mesh is one error line and
leaves no background thread to fail at exit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli_helpers import cli, train


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A tiny run of 4 steps resumed for 2 more: (workdir, first summary, resumed summary, resumed stdout)."""
    workdir = tmp_path_factory.mktemp("resume") / "run"
    first, _ = train(workdir, "train.steps=4", "train.checkpoint.every=4")
    metrics = workdir / "metrics.jsonl"  # the first run's rates marked (as if measured on another machine)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for r in records:
        if "train/tokens_per_s" in r:
            r["train/tokens_per_s"] = 1.0
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    second, proc = train(workdir, "train.steps=6", "train.checkpoint.every=4")
    return workdir, first, second, proc.stdout


def test_resumed_tokens_per_s_is_measured_on_its_own_steps(resumed):
    workdir, first, second, stdout = resumed
    assert "resuming at step 4" in stdout
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    rate = {r["step"]: r["train/tokens_per_s"] for r in records if "train/tokens_per_s" in r}
    assert [v for step, v in rate.items() if step <= 4] == [1.0] * 3  # the first run's rates are still there
    own = [v for step, v in rate.items() if step > 4]
    assert own and second["tokens_per_s"] == pytest.approx(float(np.median(own)), rel=1e-5)
    assert first["tokens_per_s"] > 1.0 and second["tokens_per_s"] > 1.0


def test_fine_tune_says_it_starts_from_the_pretrained_weights(resumed, tmp_path):
    base = resumed[0]
    proc = cli("train", "--init-from", str(base), "--workdir", str(tmp_path / "tuned"), "--sample-tokens", "0",
               "--set", "train.steps=1", "data.seq_len=32", "train.batch_size=4", "train.eval.batches=1")  # fmt: skip
    assert f"starting from the pretrained weights of {base}" in proc.stdout, proc.stdout
    assert "starting from scratch" not in proc.stdout


def test_refused_mesh_is_one_error_without_executor_noise_at_exit(tmp_path):
    for _ in range(3):  # the noise came from a race at exit: about 2 runs in 3 showed it
        _, proc = train(tmp_path / "w", "mesh.fsdp=4", check=False)  # one CPU device in the child
        assert proc.returncode == 2
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "mesh=" in errors[0] and "do not divide the 1 devices" in errors[0], proc.stderr
        assert "cannot schedule new futures" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
