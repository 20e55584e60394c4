"""Synthetic tasks: answers are right, LM weights sit on the answer only, seq2seq format."""

import numpy as np
import pytest

from transformer_jax.data import AssociativeRecallTask, CopyTask, DataConfig, DatasetConfig, ReverseTask, build_data
from transformer_jax.data.synthetic import SyntheticSource

SMALL = dict(train_size=64, val_size=16, min_len=3, max_len=8, vocab=10)


def small(task: str, **fields) -> DataConfig:
    """A small task; a seq2seq one with 24-token sources (an LM task reads no source length)."""
    sources = {"max_src_len": 24} if fields.get("format") == "seq2seq" else {}
    return DataConfig(dataset=DatasetConfig.VARIANTS.get(task)(**SMALL, **sources, **fields), seq_len=24)


EXPECTED = {
    "copy": lambda p: list(p),
    "reverse": lambda p: p[::-1],
    "sort": sorted,
}


def split_lm_row(tok, batch, r):
    """(prompt, answer) symbol lists of an LM row, and the weighted targets."""
    n = int(batch["segment_ids"][r].sum())
    x = [*batch["inputs"][r][:n], batch["targets"][r][n - 1]]
    assert x[0] == tok.bos_id
    sep = x.index(tok.sep_id)
    to_symbols = lambda ids: [int(i) - tok.sep_id - 1 for i in ids]
    weighted = batch["targets"][r][batch["weights"][r] > 0]
    return to_symbols(x[1:sep]), to_symbols(x[sep + 1 :]), to_symbols(weighted)


@pytest.mark.parametrize("task", ["copy", "reverse", "sort", "associative_recall"])
def test_lm_rows_have_correct_answers_and_answer_only_weights(task):
    data = build_data(small(task), batch_size=8)
    assert data.task == "lm" and data.vocab_size == 4 + 1 + 10
    with data.train_iterator() as it:
        batches = [next(it) for _ in range(3)]
    batches += list(data.eval_batches())
    for batch in batches:
        np.testing.assert_array_equal(
            batch["targets"][:, :-1] * (batch["segment_ids"][:, 1:] > 0), batch["inputs"][:, 1:]
        )
        for r in range(8):
            if batch["segment_ids"][r].sum() == 0:
                continue
            prompt, answer, weighted = split_lm_row(data.tokenizer, batch, r)
            assert weighted == answer  # weights only (and exactly) on the answer tokens
            if task == "associative_recall":
                keys, values, query = prompt[0:-1:2], prompt[1:-1:2], prompt[-1]
                assert len(set(keys)) == len(keys) and 3 <= len(keys) <= 8
                assert answer == [values[keys.index(query)]]
            else:
                assert 3 <= len(prompt) <= 8 and answer == EXPECTED[task](prompt)


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_seq2seq_format(task):
    data = build_data(small(task, format="seq2seq"), batch_size=4)
    assert data.task == "seq2seq"
    tok = data.tokenizer
    batch = next(iter(data.eval_batches()))
    for r in range(4):
        src = [int(t) for t in tok.decode(batch["src"][r]).split()]
        tgt = [int(t) for t in tok.decode(batch["tgt_out"][r]).split()]
        assert tgt == EXPECTED[task](src)
        n = int(batch["tgt_segment_ids"][r].sum())
        assert batch["tgt_out"][r][n - 1] == tok.eos_id and batch["tgt_in"][r][0] == tok.bos_id


def test_generated_from_the_seed():
    a = SyntheticSource("sort", 50, seed=1, split="train", min_len=2, max_len=9, vocab=7)
    b = SyntheticSource("sort", 50, seed=1, split="train", min_len=2, max_len=9, vocab=7)
    c = SyntheticSource("sort", 50, seed=2, split="train", min_len=2, max_len=9, vocab=7)
    v = SyntheticSource("sort", 50, seed=1, split="val", min_len=2, max_len=9, vocab=7)
    assert [a[i] for i in range(50)] == [b[i] for i in range(50)]
    assert [a[i] for i in range(50)] != [c[i] for i in range(50)]
    assert [a[i] for i in range(50)] != [v[i] for i in range(50)]
    assert {len(a[i][0]) for i in range(50)} <= set(range(2, 10))


def test_config_checks_room_for_the_task():
    with pytest.raises(ValueError, match="seq_len >= 33"):
        DataConfig(dataset=ReverseTask(max_len=16), seq_len=32)
    with pytest.raises(ValueError, match="data.dataset.vocab=4: is too small"):
        DataConfig(dataset=AssociativeRecallTask(vocab=4, max_len=8), seq_len=64)
    with pytest.raises(ValueError, match="max_src_len=8: is shorter than 17"):
        DataConfig(dataset=CopyTask(format="seq2seq", max_len=16, max_src_len=8))
