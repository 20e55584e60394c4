"""Two processes on 127.0.0.1 train on prepared shards, each reading its own slice; the run resumes with
two processes (it hung before: only process 0 entered a barrier of Orbax's), and a resume with one is
refused (exit 2) naming both process counts."""

import json
import subprocess
import sys

import pytest

from tests.data.conftest import make_documents
from tests.parallel.test_multiprocess import SETS, _cmd, _env, _port
from transformer_jax.data.prepare import PrepareConfig, prepare

pytestmark = pytest.mark.slow


def _two_processes(workdir, sets):
    port = _port()
    procs = []
    for i in range(2):
        cmd = _cmd(workdir, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i),
                   "--local-devices", "2", sets=sets)  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return outs[0][0]


def test_two_processes_train_and_resume_on_prepared_shards(tmp_path):
    (tmp_path / "corpus.txt").write_text("\n\n".join(make_documents(200)) + "\n")
    prepared = tmp_path / "prepared"
    prepare(PrepareConfig(inputs=(str(tmp_path / "corpus.txt"),), out=str(prepared), tokenizer="char",
                          val_fraction=0.1, shard_mb=0.004), progress=False)  # fmt: skip
    data = ["data.dataset=prepared", f"data.dataset.path={prepared}"]
    first = _two_processes(tmp_path / "w", [*SETS, *data])
    assert json.loads(first.strip().splitlines()[-1])["step"] == 3
    saved = json.loads((tmp_path / "w" / "checkpoints" / "3" / "data" / "metadata").read_text())["processes"]
    assert len(saved) == 2 and saved[0] != saved[1]  # each process's own position

    workdir = str(tmp_path / "w")
    resume = [sys.executable, "-m", "transformer_jax", "train", "--workdir", workdir, "--set", "train.steps=5"]
    one = subprocess.run(resume, env=_env(), capture_output=True, text=True, timeout=600)
    assert one.returncode == 2 and "Traceback" not in one.stderr, one.stderr[-3000:]
    assert "data position of 2 processes but 1 are running" in one.stderr and "resume with 2" in one.stderr

    # Every process restores the checkpoint's metadata (an Orbax barrier): process 0 alone hung here.
    again = _two_processes(tmp_path / "w", [*SETS[:-3], "train.steps=5", "train.eval.every=5", *data])
    assert "resuming at step 3" in again and json.loads(again.strip().splitlines()[-1])["step"] == 5
