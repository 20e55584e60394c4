"""LM pipelines: batch invariants, packing isolation, resume, sharding, eval coverage."""

import json
import warnings

import numpy as np
import pytest

from transformer_jax.data import DataConfig, TextData, build_data
from transformer_jax.data.lm import split_documents

B, T = 4, 32


def take(it, n):
    return [next(it) for _ in range(n)]


def assert_same(batches_a, batches_b):
    assert len(batches_a) == len(batches_b)
    for a, b in zip(batches_a, batches_b):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype
            np.testing.assert_array_equal(a[k], b[k])


@pytest.fixture(scope="module")
def stream(docs_file, cache_dir):
    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), cache_dir=cache_dir), seq_len=T)
    return build_data(cfg, batch_size=B)


@pytest.fixture(scope="module")
def packed(short_docs_file, cache_dir):
    path, _ = short_docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), packing="documents", cache_dir=cache_dir), seq_len=T)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_data(cfg, batch_size=B)


def check_lm_batch(batch):
    assert set(batch) == {"inputs", "targets", "segment_ids", "positions", "weights"}
    for k, v in batch.items():
        assert v.shape == (B, T), k
        assert v.dtype == (np.float32 if k == "weights" else np.int32), k


def test_stream_batches(stream):
    text = stream.corpus.text("train")
    with stream.train_iterator() as it:
        for batch in take(it, 5):
            check_lm_batch(batch)
            np.testing.assert_array_equal(batch["targets"][:, :-1], batch["inputs"][:, 1:])
            assert (batch["segment_ids"] == 1).all() and (batch["weights"] == 1).all()
            np.testing.assert_array_equal(batch["positions"], np.tile(np.arange(T), (B, 1)))
            for row_in, row_out in zip(batch["inputs"], batch["targets"]):
                assert stream.tokenizer.decode([*row_in, row_out[-1]]) in text


def segments(row):
    """(segment id, start, end) of each segment of a packed row."""
    seg = row["segment_ids"]
    out, start = [], 0
    for t in range(1, T + 1):
        if t == T or seg[t] != seg[start]:
            if seg[start] > 0:
                out.append((seg[start], start, t))
            start = t
    return out


def test_packed_batches_keep_documents_apart(packed, short_docs_file):
    _, docs = short_docs_file
    tok = packed.tokenizer
    with packed.train_iterator() as it:
        batches = take(it, 8)
    n_segments = 0
    for batch in batches:
        check_lm_batch(batch)
        for r in range(B):
            row = {k: v[r] for k, v in batch.items()}
            segs = segments(row)
            # segment ids are 1, 2, ... in order, contiguous, then padding
            assert [s for s, _, _ in segs] == list(range(1, len(segs) + 1))
            end = segs[-1][2] if segs else 0
            assert (row["segment_ids"][end:] == 0).all() and (row["weights"][end:] == 0).all()
            np.testing.assert_array_equal(row["weights"], (row["segment_ids"] > 0).astype(np.float32))
            for _, lo, hi in segs:
                n_segments += 1
                np.testing.assert_array_equal(row["positions"][lo:hi], np.arange(hi - lo))
                # targets are the inputs shifted within the segment, never the next segment's token
                np.testing.assert_array_equal(row["targets"][lo : hi - 1], row["inputs"][lo + 1 : hi])
                assert row["inputs"][lo] == tok.bos_id
                # what a position may attend to (same segment, causal) is one whole document
                seen = tok.decode([*row["inputs"][lo:hi], row["targets"][hi - 1]])
                assert any(d.startswith(seen) for d in docs), seen
                if row["targets"][hi - 1] == tok.eos_id:
                    assert seen in docs
    assert n_segments > 8 * B  # some rows hold several documents


def test_truncation_warns_once(docs_file, cache_dir):
    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), packing="documents", cache_dir=cache_dir), seq_len=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = build_data(cfg, batch_size=2)
        with data.train_iterator() as it:
            take(it, 20)
        list(data.eval_batches())
    assert len([w for w in caught if "truncated" in str(w.message)]) == 1


@pytest.mark.parametrize("which", ["stream", "packed"])
def test_resume_from_state_is_bitwise_identical(which, request):
    data = request.getfixturevalue(which)
    with data.train_iterator() as it:
        take(it, 3)
        state = json.loads(json.dumps(it.get_state()))
        expected = take(it, 4)
    with data.train_iterator(state) as resumed:
        assert_same(take(resumed, 4), expected)
    with data.train_iterator() as fresh, data.train_iterator() as again:
        assert_same(take(fresh, 3), take(again, 3))  # deterministic from the seed


def test_state_of_another_pipeline_is_rejected(stream, packed):
    with stream.train_iterator() as it:
        next(it)
        state = it.get_state()
    with packed.train_iterator() as other, pytest.raises(ValueError, match="another data pipeline"):
        other.set_state(state)


def test_stream_epochs_reshuffle_on_one_window_grid(docs_file, cache_dir):
    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), cache_dir=cache_dir), seq_len=T)
    data = build_data(cfg, batch_size=2)
    n_windows = data.split_sizes["train"]["examples"]
    T_tokens = data.pipeline.tokens("train")
    windows = np.lib.stride_tricks.sliding_window_view(T_tokens, T)
    with data.train_iterator() as it:
        first = take(it, n_windows // 2)
        second = take(it, n_windows // 2)
    rows_a = [tuple(r) for b in first for r in b["inputs"]]
    rows_b = [tuple(r) for b in second for r in b["inputs"]]
    assert rows_a != rows_b  # reshuffled (and re-offset) each epoch
    starts = [int(np.flatnonzero((windows == np.array(r)).all(1))[0]) for r in rows_a]
    assert len(set(starts)) == len(starts)  # each window once per epoch
    assert len({s % T for s in starts}) == 1  # one window grid per epoch


def test_process_rows_compose_the_single_process_batches(docs_file, cache_dir):
    """P processes with b rows each give exactly the batches of one process with P*b rows."""
    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), cache_dir=cache_dir), seq_len=T)
    single = build_data(cfg, batch_size=4)
    shards = [
        build_data(cfg, batch_size=2, tokenizer=single.tokenizer, process_index=p, process_count=2) for p in range(2)
    ]
    with single.train_iterator() as it:
        expected = take(it, 7)
    parts = []
    for shard in shards:
        with shard.train_iterator() as it:
            parts.append(take(it, 7))
    for k in range(7):
        for key in expected[k]:
            np.testing.assert_array_equal(np.concatenate([parts[0][k][key], parts[1][k][key]]), expected[k][key])


def test_eval_covers_split_once_in_order(stream):
    tokens = stream.pipeline.tokens("val")
    first = list(stream.eval_batches())
    second = list(stream.eval_batches())
    assert_same(first, second)
    for b in first:
        check_lm_batch(b)
    w = np.concatenate([b["weights"].reshape(-1) for b in first])
    targets = np.concatenate([b["targets"].reshape(-1) for b in first])
    assert w.sum() == len(tokens) - 1
    np.testing.assert_array_equal(targets[w > 0], tokens[1:])
    assert len(list(stream.eval_batches(max_batches=1))) == 1


def test_packed_eval_counts_every_document_token(packed):
    val_docs = split_documents(packed.corpus.text("val"), "paragraph")
    expected = sum(min(len(packed.tokenizer.encode(d)) + 1, T) for d in val_docs)
    batches = list(packed.eval_batches())
    assert sum(b["weights"].sum() for b in batches) == expected
    rows = [{k: v[r] for k, v in b.items()} for b in batches for r in range(B)]
    assert sum(len(segments(row)) for row in rows) == len(val_docs)


def test_eval_is_sharded_with_equal_batch_counts(docs_file, cache_dir, stream):
    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), cache_dir=cache_dir), seq_len=T)
    per_process = [
        list(build_data(cfg, batch_size=B, tokenizer=stream.tokenizer, process_index=p, process_count=3).eval_batches())
        for p in range(3)
    ]
    assert len({len(b) for b in per_process}) == 1
    total = sum(b["weights"].sum() for batches in per_process for b in batches)
    assert total == len(stream.pipeline.tokens("val")) - 1


def test_tokens_come_from_cached_shards_read_as_needed(docs_file, tmp_path, monkeypatch):
    """The split is tokenized once into token shards (prepare's format, in the cache): their stream
    equals the records tokenized one by one, a second start reuses them, and training reads only the
    records its windows need."""
    from transformer_jax.data import lm_cache
    from transformer_jax.data.shards import FORMAT_VERSION, TokenShards

    monkeypatch.setattr(lm_cache, "RECORD_BYTES", 128)  # many records from a small corpus
    path, _ = docs_file
    text = TextData(path=str(path), cache_dir=str(tmp_path), chunk_chars=64)
    cfg = DataConfig(dataset=text, seq_len=T, prefetch=0, read_threads=1)
    data = build_data(cfg, batch_size=B)
    expected = np.concatenate([data.tokenizer.encode_np(r) for r in data.corpus.split("train")])
    np.testing.assert_array_equal(data.pipeline.tokens("train"), expected)
    shards = data.pipeline.shards
    n_records = len(shards.source("train"))
    assert shards.manifest["format_version"] == FORMAT_VERSION and n_records > 100
    stamps = {p.name: p.stat().st_mtime_ns for p in shards.directory.iterdir()}
    reads = []
    real = TokenShards.source

    def counting(self, split):
        source = real(self, split)

        class Counting:
            def __len__(self):
                return len(source)

            def __getitem__(self, i):
                reads.append(i)
                return source[i]

        return Counting()

    monkeypatch.setattr(TokenShards, "source", counting)
    again = build_data(cfg, batch_size=B, tokenizer=data.tokenizer)
    with again.train_iterator() as it:
        take(it, 2)
    assert again.pipeline.shards.directory == shards.directory
    assert {p.name: p.stat().st_mtime_ns for p in shards.directory.iterdir()} == stamps
    assert 0 < len(reads) < n_records // 2, (len(reads), n_records)


def test_a_cache_written_meanwhile_by_another_process_wins(docs_file, tmp_path, monkeypatch):
    """Two processes preparing the same corpus at once: the one renaming second keeps the first's shards
    and leaves no temporary folder behind."""
    import shutil

    from transformer_jax.data import lm_cache

    path, _ = docs_file
    cfg = DataConfig(dataset=TextData(path=str(path), cache_dir=str(tmp_path)), seq_len=T)
    first = build_data(cfg, batch_size=B).pipeline
    winner = first.shards.directory
    shutil.copytree(winner, tmp_path / "copy")
    shutil.rmtree(winner)
    real = lm_cache._write

    def racing(out, *args):
        real(out, *args)
        shutil.copytree(tmp_path / "copy", winner)  # the other process renames its copy first

    monkeypatch.setattr(lm_cache, "_write", racing)
    again = build_data(cfg, batch_size=B, tokenizer=first.tokenizer).pipeline
    assert again.shards.directory == winner
    np.testing.assert_array_equal(again.tokens("val"), first.tokens("val"))
    assert sorted(p.name for p in winner.parent.iterdir()) == [winner.name]
