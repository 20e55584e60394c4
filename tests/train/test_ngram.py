"""The n-gram through the training entry points: ``train()`` dispatch, workdir contents,
evaluation on the rows a neural run scores, sampling, and the ``transformer-jax train`` command."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from transformer_jax.data import DataConfig, TextData, build_data
from transformer_jax.decode import Greedy, TopK, TopP
from transformer_jax.models import AddKSmoothing, NgramConfig, NGramLM, baseline_model_config
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.experiment import config_from_dict
from transformer_jax.train.loop import train
from transformer_jax.train.ngram import (
    NGRAM_FILE,
    evaluate_ngram,
    load_ngram,
    pick_next,
    sample_ngram,
    training_sequences,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY_KEYS = {"step", "train_loss", "val_loss", "val_perplexity", "tokens_per_s", "wall_s", "params"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    words = ["the", "king", "queen", "sword", "crown", "night", "love", "war", "rome", "fool"]
    paragraphs = [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(rng.randint(1, 3)))
        for _ in range(120)
    ]
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n\n".join(paragraphs))
    return str(path), str(tmp_path_factory.mktemp("tfds"))


def _cfg(corpus, packing="stream", seq_len=16, **baseline):
    path, cache = corpus
    return Config(
        model=baseline_model_config("ngram", NgramConfig(**{"ngram_order": 3, **baseline})),
        data=DataConfig(dataset=TextData(path=path, cache_dir=cache, packing=packing), seq_len=seq_len),
        train=TrainConfig(batch_size=4),
    )


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("ngram"))
    return workdir, train(_cfg(corpus), workdir)


def test_train_dispatches_and_writes_the_workdir(trained):
    workdir, summary = trained
    assert set(summary) >= SUMMARY_KEYS and summary["stopped"] == "fitted"
    assert np.isfinite(summary["val_loss"]) and summary["val_perplexity"] == pytest.approx(np.exp(summary["val_loss"]))
    for name in (NGRAM_FILE, "config.json", "tokenizer/tokenizer.json", "metrics.jsonl"):
        assert os.path.isfile(os.path.join(workdir, name)), name
    cfg, model, tokenizer = load_ngram(workdir)
    assert cfg.model.dims.vocab_size == tokenizer.vocab_size == model.vocab_size
    assert summary["params"] == model.n_entries


def test_evaluation_scores_the_same_rows_as_a_neural_run(trained, corpus):
    workdir, summary = trained
    result = evaluate_ngram(workdir, "val")
    assert result["loss"] == pytest.approx(summary["val_loss"])
    cfg, model, tok = load_ngram(workdir)
    data = build_data(cfg.data, batch_size=4, tokenizer=tok)
    batches = list(data.eval_batches("val"))
    assert result["tokens"] == sum(float(b["weights"].sum()) for b in batches)
    nll = sum(
        -float(np.sum(model.row_log_probs(b["inputs"], b["targets"], b["segment_ids"])[0] * b["weights"]))
        for b in batches
    )
    assert result["loss"] == pytest.approx(nll / result["tokens"])
    # Counts come from the whole training stream (n-grams across row boundaries included).
    refit = NGramLM.fit(training_sequences(data), vocab_size=tok.vocab_size, order=3)
    assert refit.n_entries == model.n_entries


def test_documents_packing_counts_whole_segments(corpus, tmp_path):
    summary = train(_cfg(corpus, packing="documents", seq_len=256, smoothing=AddKSmoothing(k=0.5)), str(tmp_path))
    cfg, model, tok = load_ngram(str(tmp_path))
    seqs = training_sequences(build_data(cfg.data, batch_size=4, tokenizer=tok))
    assert all(s[0] == tok.bos_id and s[-1] == tok.eos_id for s in seqs)
    assert np.isfinite(summary["val_loss"]) and model.smoothing == "add_k"


def test_sampling_greedy_and_top_k(trained):
    workdir, _ = trained
    _, model, tok = load_ngram(workdir)
    text = sample_ngram(workdir, prompt="the ", max_new_tokens=12, sampling=Greedy())
    ids = tok.encode("the ")
    for _ in range(12):  # greedy by hand
        ids.append(int(np.argmax(model.distribution(ids[-2:]))))
    assert text == "the " + tok.decode(ids[4:])
    assert sample_ngram(workdir, prompt="the ", max_new_tokens=12, sampling=TopK(k=1)) == text
    a = sample_ngram(workdir, prompt="the ", max_new_tokens=30, sampling=TopK(k=5), seed=3)
    assert a == sample_ngram(workdir, prompt="the ", max_new_tokens=30, sampling=TopK(k=5), seed=3)
    assert a.startswith("the ") and len(a) > 4
    p = np.array([0.1, 0.5, 0.15, 0.25])
    rng = np.random.default_rng(0)
    assert {pick_next(p, rng, TopK(k=2)) for _ in range(200)} == {1, 3}
    assert {pick_next(p, rng, TopP(p=0.7)) for _ in range(200)} == {1, 3}
    uniform = np.bincount([pick_next(p, rng, TopK(k=2, uniform=True)) for _ in range(2000)], minlength=4)
    assert uniform[[0, 2]].sum() == 0 and abs(uniform[1] - uniform[3]) < 200  # each of the two alike


def test_cli_train_fits_and_samples(corpus, tmp_path):
    path, cache = corpus
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax",
            "train",
            "--config",
            os.path.join(ROOT, "experiments", "shakespeare_char_ngram.py"),
            "--workdir",
            str(tmp_path),
            "--sample-tokens",
            "20",
            "--set",
            "data.dataset=text",
            f"data.dataset.path={path}",
            f"data.dataset.cache_dir={cache}",
            "model.baseline.ngram_order=4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--- sample ---" in proc.stdout
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary) >= SUMMARY_KEYS
    saved = config_from_dict(json.loads((tmp_path / "config.json").read_text()))
    assert saved.model.baseline.ngram_order == 4 and saved.model.kind == "ngram"
    for cmd in (
        ["eval", "--split", "val"],
        ["sample", "--prompt", "the ", "--max-new-tokens", "8", "--strategy", "greedy"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "transformer_jax", *cmd, "--workdir", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if cmd[0] == "eval":
            assert result["split"] == "val" and 1.0 < result["perplexity"] < 100.0, result
        else:
            assert result["text"].startswith("the ") and len(result["text"]) > len("the "), result
