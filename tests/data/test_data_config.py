"""DataConfig validation: errors name the field, list valid names, say the fix."""

import pytest

from transformer_jax.data import DataConfig


@pytest.mark.parametrize(
    "field,value,listed",
    [
        ("dataset", "shakespear", "did you mean 'shakespeare'"),
        ("dataset", "wikipedia", "shakespeare, text, parallel, tfds, prepared, mixture, copy, reverse, sort"),
        ("tokenizer", "wordpiece", "char, byte, sentencepiece"),
        ("packing", "pad", "stream, documents"),
        ("sp_model_type", "wordpiece", "bpe, unigram"),
        ("decode_errors", "ignore", "strict, replace"),
        ("task_format", "mlm", "lm, seq2seq"),
    ],
)
def test_unknown_names_list_the_valid_ones(field, value, listed):
    with pytest.raises(ValueError) as e:
        DataConfig(**{field: value})
    assert str(e.value).startswith(f"data.{field}={value!r}:") and listed in str(e.value)  # one format: configlib


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(dataset="text"), "data.path=None: is required when data.dataset='text'; give"),
        (dict(dataset="parallel"), "data.dir=None: is required"),
        (dict(dataset="tfds"), "data.tfds_name=None: is required"),
        (dict(val_fraction=1.0), "data.val_fraction=1.0: must be > 0.0 and < 1.0"),
        (dict(seq_len=1), "data.seq_len=1: must be >= 2"),
        (dict(prefetch=-1), "data.prefetch=-1: must be >= 0"),
        (dict(tokenizer="sentencepiece", vocab_size=100), "data.vocab_size=100: is too small for SentencePiece"),
        (dict(src_lang="en", tgt_lang="en"), "data.tgt_lang='en': equals data.src_lang"),
    ],
)
def test_bad_values_name_field_and_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataConfig(**kwargs)


def test_frozen_and_replace():
    cfg = DataConfig()
    with pytest.raises(AttributeError):
        cfg.seq_len = 3
    assert cfg.replace(seq_len=128).seq_len == 128 and cfg.seq_len == 64
