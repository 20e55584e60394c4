"""A ``gs://`` workdir and corpus on the command line (a fake ``gs://``, `tests.fake_remote`): a
whole run (the n-gram, which keeps no Orbax checkpoint) trains and samples with nothing opened as
a local path; what cannot be remote, or a scheme this environment lacks, exits 2 naming the setting.

One child process runs every command in turn (``cli.main``), so JAX starts once."""

import json
import subprocess
import sys

from tests.cli_helpers import child_env

SCRIPT = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.fake_remote import fake_gs, no_gs_backend
from transformer_jax.cli import main

tmp = Path(sys.argv[2])
store = tmp / "store"
(store / "bucket").mkdir(parents=True)
(store / "bucket" / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 200)
run = ["--workdir", "gs://bucket/run"]
ngram = ["--config", "shakespeare_char_ngram", "--sample-tokens", "0", "--set", "data.dataset=text",
         "data.dataset.path=gs://bucket/corpus.txt", "train.log.loggers=jsonl",
         f"data.dataset.cache_dir={tmp / 'cache'}"]
codes = {}
with fake_gs(store, cwd=tmp):
    codes["train"] = main(["train", *run, *ngram])
    codes["sample"] = main(["sample", *run, "--max-new-tokens", "5"])
    codes["config"] = main(["train", "--config", "gs://bucket/exp.py", "--workdir", str(tmp / "w")])
    codes["hf"] = main(["eval", "--hf", "gs://bucket/model", "--corpus", str(tmp / "c.txt")])
    codes["out"] = main(["export", "--workdir", str(tmp / "w"), "--out", "gs://bucket/hf"])
    codes["prepared"] = main(["train", "--config", "shakespeare_char", "--workdir", str(tmp / "w"),
                              "--set", "data.dataset=prepared", "data.dataset.path=gs://bucket/shards"])
    codes["resume"] = main(["train", "--workdir", "gs://bucket/empty"])
    codes["prepare"] = main(["prepare", "--input", str(tmp / "c.txt"), "--out", "gs://bucket/p", "--tokenizer", "byte"])
with no_gs_backend():
    codes["backend"] = main(["train", "--config", "shakespeare_char", *run])
    codes["backend_resume"] = main(["train", *run])
print(json.dumps(codes))
"""


def test_a_gs_workdir_and_corpus_train_and_what_must_be_local_is_refused_by_name(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, ".", str(tmp_path)], env=child_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert codes == {
        **{"train": 0, "sample": 0, "config": 2, "hf": 2, "out": 2, "prepared": 2},
        **{"resume": 2, "prepare": 2, "backend": 2, "backend_resume": 2},
    }
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    expected = [
        "--config='gs://bucket/exp.py': an experiment file",
        "--hf='gs://bucket/model': a Hugging Face model directory",
        "--out='gs://bucket/hf': a Hugging Face model directory",
        "data.dataset.path='gs://bucket/shards': prepared shards are read as local",
        "train needs --config (a recipe name, e.g. shakespeare_char, or an experiment file) or --init-from DIR: "
        "--workdir gs://bucket/empty holds no config.json",
        "--out='gs://bucket/p': prepare reads its inputs and writes its shards as local files",
        "--workdir='gs://bucket/run': this environment cannot open gs:// paths",
        "--workdir='gs://bucket/run': this environment cannot open gs:// paths",
    ]
    assert len(errors) == len(expected), errors
    for line, start in zip(errors, expected, strict=True):
        assert line.startswith(f"error: {start}"), (line, start)
    run = tmp_path / "store" / "bucket" / "run"
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "metrics.jsonl", "ngram.npz", "tokenizer"]
    saved = json.loads((run / "config.json").read_text())
    assert saved["data"]["dataset"]["path"] == "gs://bucket/corpus.txt"  # a URL is stored as given, never made local
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [0]
