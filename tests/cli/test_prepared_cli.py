"""``train --set data.dataset=prepared data.dataset.path=DIR`` on shards written by ``prepare``: it trains, and a
run stopped at step 2 and resumed ends where an uninterrupted run ends (losses and data position)."""

import json

import pytest

from tests.cli_helpers import TINY, cli
from tests.data.conftest import make_documents
from transformer_jax.data.prepare import PrepareConfig, prepare

pytestmark = pytest.mark.slow


def _train(workdir, prepared, steps, *extra):
    sets = ["data.dataset=prepared", f"data.dataset.path={prepared}", f"train.steps={steps}", *extra]
    proc = cli("train", "--config", TINY, "--workdir", str(workdir), "--sample-tokens", "0", "--set", *sets)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def _losses(workdir) -> dict[int, float]:
    lines = (json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines())
    return {m["step"]: m["train/loss"] for m in lines if "train/loss" in m}


def test_train_on_prepared_shards_and_resume_exactly(tmp_path):
    (tmp_path / "corpus.txt").write_text("\n\n".join(make_documents(300)) + "\n")
    prepared = tmp_path / "prepared"
    prepare(PrepareConfig(inputs=(str(tmp_path / "corpus.txt"),), out=str(prepared), tokenizer="char",
                          val_fraction=0.1, shard_mb=0.005), progress=False)  # fmt: skip
    straight, _ = _train(tmp_path / "a", prepared, 4)
    assert _train(tmp_path / "c", prepared, 2)[0]["step"] == 2
    resumed, proc = _train(tmp_path / "c", prepared, 4)
    assert "resuming at step 2" in proc.stdout, proc.stdout[-3000:]
    assert straight["step"] == resumed["step"] == 4
    assert straight["val_loss"] == resumed["val_loss"] and straight["train_loss"] == resumed["train_loss"]
    assert _losses(tmp_path / "a") == _losses(tmp_path / "c")
    data = [json.loads((tmp_path / w / "checkpoints" / "4" / "data" / "metadata").read_text()) for w in "ac"]
    assert data[0] == data[1] and len(json.dumps(data[0])) < 1000  # a few indices, whatever the corpus
