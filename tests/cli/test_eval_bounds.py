"""Validation is bounded by default: ``train.eval.batches`` (50 unless set) batches during training
and in ``eval``, which says how many it read; ``eval --full`` reads the whole split."""

from __future__ import annotations

import json

import numpy as np

from tests.cli_helpers import cli, train
from transformer_jax.train.config import TrainConfig


def _summary(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_eval_is_bounded_by_train_eval_batches_and_full_reads_the_split(tmp_path):
    assert TrainConfig().eval.batches == 50
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join("".join(rng.choice(list("abcdefgh "), 60)) for _ in range(400)))
    workdir = tmp_path / "run"
    _, proc = train(
        workdir, "data.dataset=text", f"data.dataset.path={corpus}", "train.steps=2", "train.eval.batches=3"
    )
    assert "(3 batches)" in proc.stdout + proc.stderr  # the validation log line says how many
    logged = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [m["val/batches"] for m in logged if "val/batches" in m][-1] == 3

    bounded = _summary(cli("eval", "--workdir", str(workdir)))
    assert (bounded["batches"], bounded["max_batches"]) == (3, 3)
    full = _summary(cli("eval", "--workdir", str(workdir), "--full"))
    assert full["max_batches"] is None and full["batches"] > 3 and full["tokens"] > bounded["tokens"]
    proc = cli("eval", "--workdir", str(workdir), "--full", "--max-batches", "2", check=False)
    assert proc.returncode == 2 and "give one of them" in proc.stderr, proc.stderr
