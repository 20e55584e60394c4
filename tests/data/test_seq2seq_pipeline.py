"""Seq2seq pipeline: batch format, process sharding, resume, eval coverage; SentencePiece on a local
caption corpus and on Multi30k (the local corpus where Multi30k is absent)."""

import gzip
import json
import unicodedata

import numpy as np
import pytest

from transformer_jax.data import DataConfig, ParallelData, SentencePieceSettings, build_data

B, S, T = 4, 28, 30


@pytest.fixture(scope="module")
def cfg(parallel_dir, cache_dir):
    return DataConfig(
        dataset=ParallelData(dir=str(parallel_dir), src_lang="de", tgt_lang="en", max_src_len=S, cache_dir=cache_dir),
        seq_len=T,
    )


@pytest.fixture(scope="module")
def data(cfg):
    return build_data(cfg, batch_size=B)


def src_text(data, batch, r):
    return data.tokenizer.decode(batch["src"][r])


def check_row(data, batch, r):
    tok = data.tokenizer
    ns, nt = int(batch["src_segment_ids"][r].sum()), int(batch["tgt_segment_ids"][r].sum())
    assert batch["src"][r][ns - 1] == tok.eos_id and (batch["src"][r][ns:] == 0).all()
    np.testing.assert_array_equal(batch["src_positions"][r][:ns], np.arange(ns))
    assert batch["tgt_in"][r][0] == tok.bos_id and batch["tgt_out"][r][nt - 1] == tok.eos_id
    np.testing.assert_array_equal(batch["tgt_in"][r][1:nt], batch["tgt_out"][r][: nt - 1])
    np.testing.assert_array_equal(batch["weights"][r], batch["tgt_segment_ids"][r].astype(np.float32))
    np.testing.assert_array_equal(batch["tgt_positions"][r][:nt], np.arange(nt))


def test_batch_format(data):
    assert data.task == "seq2seq"
    with data.train_iterator() as it:
        batch = next(it)
    shapes = {k: (v.shape, v.dtype.name) for k, v in batch.items()}
    src_keys = ("src", "src_segment_ids", "src_positions")
    tgt_keys = ("tgt_in", "tgt_out", "tgt_segment_ids", "tgt_positions")
    assert shapes == {
        **{k: ((B, S), "int32") for k in src_keys},
        **{k: ((B, T), "int32") for k in tgt_keys},
        "weights": ((B, T), "float32"),
    }
    assert shapes == {k: (s, d.name) for k, (s, d) in data.batch_spec().items()}
    for r in range(B):
        check_row(data, batch, r)
        src, tgt = src_text(data, batch, r), data.tokenizer.decode(batch["tgt_out"][r])
        i = int(src.split()[1])
        assert i < 48 and (src, tgt) == (f"satz {i}" + " x" * (i % 5), f"sentence {i}" + " x" * (i % 5))


def test_process_rows_compose_the_single_process_batches(cfg, data):
    """3 processes with B rows each read disjoint rows that form the batches of one process with 3B."""
    single = build_data(cfg, batch_size=3 * B, tokenizer=data.tokenizer)
    with single.train_iterator() as it:
        expected = [next(it) for _ in range(48 // (3 * B))]
    parts = []
    for p in range(3):
        shard = build_data(cfg, batch_size=B, tokenizer=data.tokenizer, process_index=p, process_count=3)
        with shard.train_iterator() as it:
            parts.append([next(it) for _ in range(len(expected))])
    seen = [{src_text(data, b, r) for b in parts[p] for r in range(B)} for p in range(3)]
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    assert len(set.union(*seen)) == 48
    for k, batch in enumerate(expected):
        for key in batch:
            np.testing.assert_array_equal(np.concatenate([parts[p][k][key] for p in range(3)]), batch[key])


def test_epochs_are_reshuffled_and_resume_is_exact(data):
    with data.train_iterator() as it:
        epoch1 = [src_text(data, b, r) for b in [next(it) for _ in range(48 // B)] for r in range(B)]
        epoch2 = [src_text(data, b, r) for b in [next(it) for _ in range(48 // B)] for r in range(B)]
        assert sorted(epoch1) == sorted(epoch2) and epoch1 != epoch2
        state = json.loads(json.dumps(it.get_state()))
        expected = [next(it) for _ in range(3)]
    with data.train_iterator(state=state) as it:
        for a in expected:
            b = next(it)
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])


def test_eval_covers_each_pair_once_with_padded_last_batch(data):
    batches = list(data.eval_batches("val"))
    assert len(batches) == 3 and all(b["src"].shape == (B, S) for b in batches)
    for a, b in zip(batches, data.eval_batches("val"), strict=True):  # deterministic
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    real = [(b, r) for b in batches for r in range(B) if b["weights"][r].sum() > 0]
    assert [src_text(data, b, r) for b, r in real] == [f"satz {i}" + " x" * (i % 5) for i in range(100, 110)]
    assert batches[-1]["weights"][2:].sum() == 0 and batches[-1]["src_segment_ids"][2:].sum() == 0
    assert len(list(data.eval_batches("test"))) == 2
    assert len(list(data.eval_batches("val", max_batches=2))) == 2


def _first_val_pair(root):
    pair = []
    for lang in ("de", "en"):
        with gzip.open(root / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            pair.append(unicodedata.normalize("NFKC", f.readline().strip()))
    return tuple(pair)


def _lines(root, split, lang):
    with gzip.open(root / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [unicodedata.normalize("NFKC", line.strip()) for line in f.read().splitlines()]


def _sentencepiece_data(root, cache_dir, vocab_size, length):
    cfg = DataConfig(
        dataset=ParallelData(
            tokenizer=SentencePieceSettings(vocab_size=vocab_size, max_sentences=20000),
            dir=str(root),
            max_src_len=length,
            cache_dir=cache_dir,
        ),
        seq_len=length,
    )
    return build_data(cfg, batch_size=B)


def test_sentencepiece_seq2seq_on_local_captions(captions_dir, cache_dir):
    """The Multi30k recipe (shared SentencePiece vocabulary over both sides, ``{split}.{lang}.gz``)
    on the local caption corpus: rows are well formed and decode back to the corpus lines."""
    data = _sentencepiece_data(captions_dir, cache_dir, 400, 40)
    assert data.task == "seq2seq" and data.vocab_size == 400
    batches = list(data.eval_batches("val"))
    assert len(batches) == -(-60 // B)
    real = [(b, r) for b in batches for r in range(B) if b["weights"][r].sum() > 0]
    assert len(real) == 60
    for b, r in real[:8]:
        check_row(data, b, r)
    assert (src_text(data, *real[0]), data.tokenizer.decode(real[0][0]["tgt_out"][real[0][1]])) == _first_val_pair(
        captions_dir
    )
    train_en = set(_lines(captions_dir, "train", "en"))
    with data.train_iterator() as it:
        batch = next(it)
    for r in range(B):
        check_row(data, batch, r)
        assert data.tokenizer.decode(batch["tgt_out"][r]) in train_en


@pytest.mark.filterwarnings("ignore:some pairs are longer")
def test_multi30k_sentencepiece(multi30k, captions_dir, cache_dir):
    """The real corpus the Multi30k experiment reads (29k pairs, sampled SentencePiece training,
    over-long pairs cut), or the local captions where it is absent (tests/data/conftest.py)."""
    real = multi30k != captions_dir
    vocab_size = 1000 if real else 400
    data = _sentencepiece_data(multi30k, cache_dir, vocab_size, 64)
    assert data.vocab_size == vocab_size
    batch = next(iter(data.eval_batches()))
    src, tgt = _first_val_pair(multi30k)
    assert data.tokenizer.decode(batch["src"][0]) == src
    assert data.tokenizer.decode(batch["tgt_out"][0]) == tgt
    if real:
        assert src == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
        assert tgt == "A group of men are loading cotton onto a truck"
