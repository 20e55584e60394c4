"""Seq2seq pipeline: batch format, process sharding, resume, eval coverage, Multi30k."""

import json

import numpy as np
import pytest

from transformer_jax.data import DataConfig, build_data

B, S, T = 4, 28, 30


@pytest.fixture(scope="module")
def cfg(parallel_dir, cache_dir):
    return DataConfig(
        dataset="parallel",
        dir=str(parallel_dir),
        src_lang="de",
        tgt_lang="en",
        seq_len=T,
        max_src_len=S,
        cache_dir=cache_dir,
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


@pytest.mark.filterwarnings("ignore:some pairs are longer")
def test_multi30k_sentencepiece(multi30k, cache_dir):
    cfg = DataConfig(
        dataset="parallel",
        dir=str(multi30k),
        tokenizer="sentencepiece",
        vocab_size=1000,
        seq_len=64,
        max_src_len=64,
        cache_dir=cache_dir,
        sp_max_sentences=20000,
    )
    data = build_data(cfg, batch_size=8)
    assert data.vocab_size == 1000
    batch = next(iter(data.eval_batches()))
    assert data.tokenizer.decode(batch["src"][0]) == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
    assert data.tokenizer.decode(batch["tgt_out"][0]) == "A group of men are loading cotton onto a truck"
