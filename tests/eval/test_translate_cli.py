"""The translation commands end to end on a tiny parallel corpus: train (validation BLEU, best
checkpoint by it), ``translate`` (one hypothesis per input line, nothing else on stdout), ``eval``
(beam and greedy BLEU with the sacrebleu signature beside loss and perplexity)."""

import json
import os

import numpy as np

from tests.cli_helpers import cli, train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENT = os.path.join(ROOT, "experiments", "multi30k_de_en.py")
WORDS = ["the", "a", "man", "woman", "dog", "cat", "runs", "sits"]
WORDS += ["on", "in", "red", "blue", "big", "small", "street", "park"]


def _corpus(path, n_train=300, n_val=12):
    rng = np.random.default_rng(0)
    pairs = [[WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(2, 5))] for _ in range(n_train + n_val)]
    for split, rows in (("train", pairs[:n_train]), ("val", pairs[n_train:])):
        (path / f"{split}.en").write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
        (path / f"{split}.de").write_text("".join(" ".join(w[::-1] for w in r) + "\n" for r in rows), encoding="utf-8")
    return [" ".join(w[::-1] for w in r) for r in pairs[n_train:]]


def test_train_translate_eval(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    sources = _corpus(data)
    workdir = tmp_path / "run"
    summary, _ = train(
        workdir,
        f"data.dataset.dir={data}",
        f"data.dataset.cache_dir={tmp_path / 'cache'}",
        "data.dataset.tokenizer=byte",
        "model.dims.d_model=32",
        "model.dims.n_heads=2",
        "model.dims.d_ff=64",
        "model.dims.n_layers=1",
        "model.dims.n_encoder_layers=1",
        "train.steps=8",
        "train.eval.every=8",
        "train.checkpoint.every=8",
        "train.batch_size=16",
        "train.eval.batches=1",
        "train.optim.warmup_steps=4",
        experiment=EXPERIMENT,
    )
    assert summary is not None and "val_bleu" in json.dumps(summary), summary

    proc = cli(
        "translate",
        "--workdir",
        str(workdir),
        "--beam",
        "2",
        "--max-new-tokens",
        "12",
        input="".join(s + "\n" for s in sources),
    )
    hyps = proc.stdout.split("\n")[:-1]
    assert len(hyps) == len(sources), proc.stdout
    assert json.loads(proc.stderr.strip().splitlines()[-1])["sentences"] == len(sources)

    proc = cli("eval", "--workdir", str(workdir), "--beam", "2", "--max-sentences", "6")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"loss", "perplexity", "bleu", "bleu_greedy", "bleu_signature"} <= set(result), result
    assert 0.0 <= result["bleu"] <= 100.0 and result["bleu_sentences"] == 6
    assert "nrefs:1" in result["bleu_signature"]
