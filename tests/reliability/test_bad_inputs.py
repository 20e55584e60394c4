"""Bad configs are rejected before anything compiles, naming the field and the fix; bad data is
rejected naming the file (or handled with exactly one warning where the policy says so)."""

import gzip
import os
import warnings

import jax
import numpy as np
import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import ByteSettings, DataConfig, ParallelData, TextData, build_data
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.run import setup

TINY = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")

BAD = [  # (overrides, field the message must start with, a word of the fix)
    (["model.dims.d_model=30", "model.dims.n_heads=4"], "model.dims.d_model", "n_heads"),
    (["model.dims.n_kv_heads=3"], "model.dims.n_kv_heads", "divisor"),
    (["model.placement=postln"], "model.placement", "post"),
    (["model.position=rope", "model.dims.head_dim=15"], "model.dims.head_dim", "even"),
    (["model.attention=sliding_window", "model.attention.window=0"], "model.attention.window", ">= 1"),
    (["model.dropout=1.0"], "model.dropout", "< 1"),
    (["model.dims.max_len=16"], "data.seq_len", "raise model.dims.max_len"),
    (["model.kind=encoder_decoder", "model.dims.n_encoder_layers=1"], "model.kind", "decoder_lm"),
    (["train.batch_size=6", "train.grad_accum=4"], "train.grad_accum", "divisor"),
    (["train.optim.optimizer=adamm"], "train.optim.optimizer", "adam"),
    (["train.optim.lr=-1"], "train.optim.lr", "must be > 0.0"),
    (["train.optim.schedule.min_lr=1"], "train.optim.schedule.min_lr", "min_lr <= lr"),
    (["train.loss.label_smoothing=1.5"], "train.loss.label_smoothing", ">= 0.0 and < 1.0"),
    (["train.nonfinite=ignore"], "train.nonfinite", "skip"),
    (["train.checkpoint.best.mode=biggest"], "train.checkpoint.best.mode", "max"),
    (["data.dataset=shakespear"], "data.dataset", "shakespeare"),
    (["data.dataset.tokenizer=wordpiece"], "data.dataset.tokenizer", "sentencepiece"),
    (["data.dataset=text"], "data.dataset.path", "give a text file"),
    (["data.dataset.val_fraction=1.5"], "data.dataset.val_fraction", "> 0.0 and < 1.0"),
    (
        ["data.dataset.tokenizer=sentencepiece", "data.dataset.tokenizer.vocab_size=50"],
        "data.dataset.tokenizer.vocab_size",
        "use >=",
    ),
    (["mesh.data=-1", "mesh.fsdp=-1"], "mesh", "at most one axis"),
    (["mesh.tensor=0"], "mesh.tensor", "positive"),
    (["mesh.data=3"], "mesh", "set one axis to -1"),
    (["train.batch_size=4", "mesh.data=8"], "train.batch_size", "change the batch size"),
]


@pytest.fixture
def no_compilation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("jax.jit was called before the config error")

    monkeypatch.setattr(jax, "jit", refuse)


@pytest.mark.parametrize("sets,field,fix", BAD, ids=[b[1] + ":" + str(i) for i, b in enumerate(BAD)])
def test_bad_config_names_field_and_fix_before_compiling(tmp_path, no_compilation, sets, field, fix):
    with pytest.raises(ConfigError) as err:
        cfg = load_experiment(TINY, sets)
        setup(cfg, str(tmp_path / "run"), devices=jax.devices())
    message = str(err.value)
    assert message.startswith(field), message
    assert fix in message, message


def _text_cfg(path, **kw):
    return DataConfig(dataset=TextData(path=str(path), cache_dir=str(path.parent / "cache"), **kw), seq_len=16)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        build_data(_text_cfg(tmp_path / "nope.txt"), batch_size=2)


def test_empty_corpus_is_named(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n\n ")
    with pytest.raises(ValueError, match="empty.txt.*empty"):
        build_data(_text_cfg(tmp_path / "empty.txt"), batch_size=2)


def test_non_utf8_is_named_with_its_line_or_replaced_with_one_warning(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(("good line\n" * 50 + "caf\xe9 au lait\n" + "more text\n" * 50).encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt.*line 51"):
        build_data(_text_cfg(path), batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = build_data(_text_cfg(path, decode_errors="replace"), batch_size=2)
    assert sum("U+FFFD" in str(w.message) or "replace" in str(w.message) for w in caught) == 1
    assert "\ufffd" in data.tokenizer.decode(data.pipeline.tokens("train").tolist())


def _parallel(tmp_path, src_lines, tgt_lines):
    for split in ("train", "val"):
        with gzip.open(tmp_path / f"{split}.de.gz", "wt") as f:
            f.write("\n".join(src_lines) + "\n")
        with gzip.open(tmp_path / f"{split}.en.gz", "wt") as f:
            f.write("\n".join(tgt_lines) + "\n")
    return DataConfig(
        dataset=ParallelData(
            tokenizer=ByteSettings(), dir=str(tmp_path), max_src_len=12, cache_dir=str(tmp_path / "cache")
        ),
        seq_len=12,
    )


def test_parallel_line_count_mismatch_names_both_files(tmp_path):
    cfg = _parallel(tmp_path, ["eins", "zwei", "drei"], ["one", "two"])
    with pytest.raises(ValueError) as err:
        build_data(cfg, batch_size=2)
    assert "train.de.gz" in str(err.value) and "train.en.gz" in str(err.value)
    assert "3" in str(err.value) and "2" in str(err.value)


def test_lines_longer_than_the_context_are_truncated_with_one_warning(tmp_path):
    cfg = _parallel(
        tmp_path,
        ["ein sehr langer satz der nicht passt"] * 8 + ["kurz"] * 8,
        ["a very long sentence that does not fit"] * 8 + ["short"] * 8,
    )
    data = build_data(cfg, batch_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with data.train_iterator() as it:
            batches = [next(it) for _ in range(8)]
    assert sum("truncat" in str(w.message) for w in caught) == 1
    assert all(b["src"].shape == (4, 12) and b["tgt_in"].shape == (4, 12) for b in batches)


def test_tokens_outside_the_vocabulary_at_evaluation_become_unk_with_one_warning(tmp_path):
    train_path, val_path = tmp_path / "train.txt", tmp_path / "val.txt"
    train_path.write_text("abcabcabc " * 200)
    val_path.write_text("abcxyz " * 100)
    data = build_data(_text_cfg(train_path, val_path=str(val_path)), batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(data.eval_batches("val"))
    assert sum("unk" in str(w.message).lower() or "not seen" in str(w.message) for w in caught) == 1
    inputs = np.concatenate([b["inputs"].ravel() for b in batches])
    assert (inputs == data.tokenizer.unk_id).any()
