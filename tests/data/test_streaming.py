"""``data.dataset=prepared``: training streams token shards written by ``prepare``, packed on the fly.

References are numpy written here: the ``[BOS] doc [EOS]`` stream cut into windows, a document cut
into pieces. Behaviour: two processes read disjoint slices that cover the split; a resumed iterator
gives exactly the batches of an uninterrupted one; settings the shards fix are refused."""

import json
import typing

import numpy as np
import pytest

from tests.data.conftest import make_documents
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.core.tokens import BOS_ID, EOS_ID
from transformer_jax.data import DataConfig, PreparedData, build_data, load_tokenizer
from transformer_jax.data.prepare import PrepareConfig, prepare
from transformer_jax.data.shards import TokenShards

T, B = 16, 4


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    (root / "corpus.txt").write_text("\n\n".join(make_documents(150, seed=3)) + "\n")
    out = root / "shards"
    prepare(PrepareConfig(inputs=(str(root / "corpus.txt"),), out=str(out), tokenizer="char", shard_mb=0.002,
                          val_fraction=0.1), progress=False)  # fmt: skip
    shards = TokenShards(out)
    assert len(shards.files("train")) > 3 and "val" in shards.splits
    return out, [np.asarray(d, np.int64) for d in shards.documents("train")]


def data_of(path, *, process_index=0, process_count=1, batch_size=B, packing="stream", **kw):
    cfg = DataConfig(dataset=PreparedData(path=str(path), packing=packing), seq_len=T, **kw)
    return build_data(cfg, batch_size=batch_size, process_index=process_index, process_count=process_count)


def take(data, n, state=None):
    with data.train_iterator(state) as it:
        return [next(it) for _ in range(n)]


def framed(docs) -> np.ndarray:
    return np.concatenate([np.concatenate([[BOS_ID], d, [EOS_ID]]) for d in docs])


def test_stream_batches_equal_numpy_windows_across_epochs(prepared):
    path, docs = prepared
    stream = framed(docs + docs)  # two epochs, in order (no shuffle)
    n = (len(framed(docs)) // (B * T)) + 3
    spec = {k: v[1] for k, v in data_of(path).batch_spec().items()}
    for k, batch in enumerate(take(data_of(path, shuffle=False), n)):
        for r in range(B):
            s = (k * B + r) * T
            np.testing.assert_array_equal(batch["inputs"][r], stream[s : s + T])
            np.testing.assert_array_equal(batch["targets"][r], stream[s + 1 : s + T + 1])
        np.testing.assert_array_equal(batch["segment_ids"], np.ones((B, T)))
        np.testing.assert_array_equal(batch["positions"], np.tile(np.arange(T), (B, 1)))
        np.testing.assert_array_equal(batch["weights"], np.ones((B, T)))
        assert {k: v.dtype for k, v in batch.items()} == spec


def rows_of(batches) -> list[tuple]:
    """Each batch row as its window of T + 1 tokens."""
    return [tuple(r) for b in batches for r in np.concatenate([b["inputs"], b["targets"][:, -1:]], axis=1)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_two_processes_read_disjoint_slices_covering_the_split(prepared, shuffle):
    path, docs = prepared
    firsts = []
    for p in range(2):
        data = data_of(path, process_index=p, process_count=2, batch_size=2, shuffle=shuffle)
        epoch = len(range(p, len(docs), 2))
        it = iter(data.pipeline.documents("train", p, 2))
        order = [np.asarray(next(it), np.int64) for _ in range(2 * epoch)]  # two epochs
        firsts.append([tuple(d) for d in order[:epoch]])
        stream = framed(order)
        n = 256 if shuffle else 100  # rows: one shuffle window (data.pipeline.window(2)) or any number
        assert not shuffle or data.pipeline.window(2) == n
        naive = [tuple(stream[k * T : k * T + T + 1]) for k in range(n)]
        got = rows_of(take(data, n // 2))
        if shuffle:
            assert sorted(got) == sorted(naive) and got != naive
        else:
            assert got == naive
    assert not set(firsts[0]) & set(firsts[1])
    assert sorted(firsts[0] + firsts[1]) == sorted(tuple(d) for d in docs)


def test_epochs_are_reshuffled(prepared):
    path, docs = prepared
    it = iter(data_of(path).pipeline.documents("train", 0, 1))
    first, second = ([tuple(next(it)) for _ in docs] for _ in range(2))
    assert sorted(first) == sorted(second) == sorted(tuple(d) for d in docs)
    assert first != second and first != [tuple(d) for d in docs]


def pieces_of(docs) -> list[tuple]:
    """Each document ``[BOS] ids [EOS]`` cut into consecutive (inputs, targets) of <= T, naively."""
    out = []
    for d in docs:
        x = [BOS_ID, *d.tolist(), EOS_ID]
        s = 0
        while s < len(x) - 1:
            e = min(s + T, len(x) - 1)
            out.append((tuple(x[s:e]), tuple(x[s + 1 : e + 1])))
            s = e
    return out


def segments_of(batch) -> list[tuple]:
    out = []
    for r in range(len(batch["inputs"])):
        seg = batch["segment_ids"][r]
        real = seg > 0
        assert not real[np.argmin(real) :].any() if not real.all() else True  # padding only at the end
        np.testing.assert_array_equal(batch["weights"][r], real.astype(np.float32))
        for s in np.unique(seg[real]):
            idx = np.flatnonzero(seg == s)
            assert idx[-1] - idx[0] == len(idx) - 1  # contiguous
            np.testing.assert_array_equal(batch["positions"][r][idx], np.arange(len(idx)))
            out.append((tuple(batch["inputs"][r][idx]), tuple(batch["targets"][r][idx])))
        assert not batch["inputs"][r][~real].any() and not batch["positions"][r][~real].any()
    return out


def test_documents_packing_keeps_segments_and_covers_every_piece(prepared):
    path, docs = prepared
    pieces = pieces_of(docs)
    assert max(len(d) for d in docs) + 2 > T + 1  # some documents are cut into several pieces
    batches = take(data_of(path, packing="documents", shuffle=False), len(pieces) // B + 4)
    segments = [s for batch in batches for s in segments_of(batch)]
    assert max(b["segment_ids"].max() for b in batches) > 1  # rows hold several pieces
    assert set(segments) <= set(pieces)
    assert set(segments[: len(pieces) + 2 * B]) == set(pieces)  # one epoch, give or take the open bins


@pytest.mark.parametrize("packing", ["stream", "documents"])
@pytest.mark.parametrize("process", [0, 1])
def test_resume_from_a_saved_state_is_exact(prepared, packing, process):
    path, _ = prepared
    data = data_of(path, packing=packing, process_index=process, process_count=2, batch_size=2)
    straight = take(data, 12)
    for k in (1, 5, 9):
        with data.train_iterator() as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))  # as a checkpoint stores it
        again = data_of(path, packing=packing, process_index=process, process_count=2, batch_size=2, prefetch=0)
        for a, b in zip(straight[k:], take(again, 12 - k, state), strict=True):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])


def test_a_state_of_another_process_count_is_refused(prepared):
    path, _ = prepared
    with data_of(path, process_count=2, batch_size=2).train_iterator() as it:
        next(it)
        state = it.get_state()
    with pytest.raises(ValueError, match="process index/count"):
        data_of(path, batch_size=2).train_iterator(state)


def test_eval_rows_are_the_val_stream_in_order_and_sharded_evenly(prepared):
    path, _ = prepared
    val = [np.asarray(d, np.int64) for d in TokenShards(path).documents("val")]
    stream = framed(val)
    n_rows = -(-(len(stream) - 1) // T)
    whole = list(data_of(path).eval_batches("val"))
    inputs = np.concatenate([b["inputs"] for b in whole])[:n_rows]
    targets = np.concatenate([b["targets"] for b in whole])[:n_rows]
    weights = np.concatenate([b["weights"] for b in whole])
    padded = np.zeros(n_rows * T + 1, np.int64)
    padded[: len(stream)] = stream
    starts = np.arange(n_rows)[:, None] * T + np.arange(T)
    real = starts < len(stream) - 1
    np.testing.assert_array_equal(inputs, np.where(real, padded[starts], 0))
    np.testing.assert_array_equal(targets, np.where(real, padded[starts + 1], 0))
    assert weights.sum() == len(stream) - 1 == data_of(path).split_sizes["val"]["tokens"]
    shards = [list(data_of(path, process_index=p, process_count=2).eval_batches("val")) for p in range(2)]
    per_process = -(-n_rows // 2)
    assert len(shards[0]) == len(shards[1]) == -(-per_process // B)
    mine = [np.concatenate([b["inputs"] for b in s]) for s in shards]
    np.testing.assert_array_equal(mine[0][: len(inputs[0::2])], inputs[0::2])
    np.testing.assert_array_equal(mine[1][: len(inputs[1::2])], inputs[1::2])
    assert [len(list(data_of(path, process_index=p, process_count=2).eval_batches("val", 1))) for p in (0, 1)] == [1, 1]


def test_documents_eval_counts_every_target_once(prepared):
    path, _ = prepared
    val = [np.asarray(d, np.int64) for d in TokenShards(path).documents("val")]
    batches = list(data_of(path, packing="documents").eval_batches("val"))
    segments = [s for b in batches for s in segments_of(b)]
    assert sorted(segments) == sorted(pieces_of(val))
    assert sum(b["weights"].sum() for b in batches) == sum(len(d) + 1 for d in val)


def test_the_tokenizer_is_the_prepared_one_and_settings_it_fixes_are_refused(prepared, tmp_path):
    path, _ = prepared
    data = data_of(path)
    assert data.tokenizer.to_json() == load_tokenizer(path).to_json() and data.vocab_size == data.tokenizer.vocab_size
    for field, value in (("tokenizer", "byte"), ("document_split", "line"), ("val_fraction", 0.2)):
        with pytest.raises(ConfigError, match=f"the dataset 'prepared' has no setting '{field}'"):
            apply_overrides(DataConfig(), ["dataset=prepared", f"dataset.path={path}", f"dataset.{field}={value}"])
    with pytest.raises(ConfigError, match="data.dataset.path=None: is required when data.dataset='prepared'"):
        DataConfig(dataset=PreparedData())
    with pytest.raises(FileNotFoundError, match="data.dataset.path: .* is not a directory"):
        data_of(tmp_path / "missing")
    from transformer_jax.data import ByteTokenizer

    cfg = DataConfig(dataset=PreparedData(path=str(path)), seq_len=T)
    with pytest.raises(ConfigError, match="holds another tokenizer"):
        build_data(cfg, batch_size=B, tokenizer=ByteTokenizer())


def test_shards_without_a_val_split_are_refused(tmp_path):
    (tmp_path / "c.txt").write_text("\n\n".join(make_documents(20)) + "\n")
    prepare(PrepareConfig(inputs=(str(tmp_path / "c.txt"),), out=str(tmp_path / "p"), tokenizer="byte"), progress=False)
    with pytest.raises(ConfigError, match="has no val split .* `--val-fraction`"):
        data_of(tmp_path / "p")


def test_the_pipeline_registries_match_the_config_choices():
    """Every dataset and tokenizer setting has its implementation by the same name, and vice versa
    (the symbols of the synthetic tasks and Hugging Face tokenizers are not trained from settings)."""
    from transformer_jax.data import DatasetConfig, TokenizerConfig
    from transformer_jax.data.config import Packing
    from transformer_jax.data.lm import PACKINGS
    from transformer_jax.data.sources import DATASETS
    from transformer_jax.data.streaming import TOKEN_PACKINGS
    from transformer_jax.data.tokenizers import TOKENIZERS

    assert set(DATASETS.names()) == set(DatasetConfig.VARIANTS.names())
    assert set(TOKENIZERS.names()) - set(TokenizerConfig.VARIANTS.names()) == {"symbols", "huggingface"}
    assert set(TokenizerConfig.VARIANTS.names()) <= set(TOKENIZERS.names())
    assert set(PACKINGS.names()) == set(TOKEN_PACKINGS.names()) == set(typing.get_args(Packing))


def test_training_reads_records_as_it_needs_them(tmp_path, monkeypatch):
    """Nothing of the split is read up front: building the data reads no record, and a few batches
    read a few records (those of the windows plus grain's read-ahead), not the split."""
    (tmp_path / "c.txt").write_text("\n".join(f"line {i} of a corpus" for i in range(3000)) + "\n")
    prepare(PrepareConfig(inputs=(str(tmp_path / "c.txt"),), out=str(tmp_path / "p"), tokenizer="byte",
                          documents="line", val_fraction=0.05), progress=False)  # fmt: skip
    log: dict[str, list] = {}

    class Counting:
        def __init__(self, source):
            self.source, self.reads = source, log["reads"]  # a stopped iterator's reads go to its own list

        def __len__(self):
            return len(self.source)

        def __getitem__(self, i):
            self.reads.append(i)
            return self.source[i]

    real = TokenShards.source
    monkeypatch.setattr(TokenShards, "source", lambda self, split: Counting(real(self, split)))
    for packing in ("stream", "documents"):
        reads = log["reads"] = []
        data = data_of(tmp_path / "p", packing=packing, read_threads=1)
        assert data.split_sizes["train"]["tokens"] > 50_000 and not reads
        take(data, 2)
        assert 0 < len(reads) < 200, len(reads)
