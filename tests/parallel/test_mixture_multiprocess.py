"""Two processes on 127.0.0.1 train on a 3-source mixture whose weights change at step 4 (each process
reads its own slice of every source): a run stopped at step 3 and resumed to step 5 logs bitwise the
losses, per source too, and ends at the data position of an uninterrupted run."""

import json

import pytest

from tests.data.test_mixture import ALPHABETS, prepare_source
from tests.parallel.test_multiprocess import SETS
from tests.parallel.test_prepared_multiprocess import _two_processes

pytestmark = pytest.mark.slow
TIMING = ("time", "train/tokens_per_s", "train/mfu")


def _train_records(workdir) -> list[dict]:
    lines = (json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines())
    return [{k: v for k, v in r.items() if k not in TIMING} for r in lines if "train/loss" in r]


def test_two_processes_on_a_mixture_resume_bitwise(tmp_path):
    paths = {name: prepare_source(tmp_path, name, alphabet, n=120) for name, alphabet in ALPHABETS.items()}
    mixture = ",".join(f"{name}={paths[name]}:{w}" for name, w in zip(ALPHABETS, (0.5, 0.3, 0.2), strict=True))
    data = ["data.dataset=mixture", f"data.dataset.mixture={mixture}",
            "data.dataset.schedule=4:web=0.1,code=0.1,math=0.8",
            "train.eval.every=5"]  # fmt: skip
    straight = _two_processes(tmp_path / "a", [*SETS, "train.steps=5", *data])
    assert json.loads(straight.strip().splitlines()[-1])["step"] == 5
    _two_processes(tmp_path / "b", [*SETS, *data])  # stops at step 3
    resumed = _two_processes(tmp_path / "b", [*SETS, "train.steps=5", *data])
    assert "resuming at step 3" in resumed
    a, b = _train_records(tmp_path / "a"), _train_records(tmp_path / "b")
    assert [r["step"] for r in a] == [1, 2, 3, 4, 5] and a == b
    assert {"train/loss/web", "train/loss/code", "train/loss/math"} <= set().union(*a)
    positions = [json.loads((tmp_path / w / "checkpoints" / "5" / "data" / "metadata").read_text()) for w in "ab"]
    assert positions[0] == positions[1] and len(positions[0]["processes"]) == 2
