"""DataConfig validation: errors name the field, list valid names, say the fix."""

import re

import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.data import (
    CopyTask,
    DataConfig,
    MixtureData,
    ParallelData,
    SentencePieceSettings,
    ShakespeareData,
    TextData,
    TfdsData,
)


@pytest.mark.parametrize(
    "make,field,listed",
    [
        (lambda: DataConfig(dataset="wikipedia"), "data.dataset='wikipedia'", "shakespeare, text, parallel, tfds"),
        (lambda: DataConfig(dataset="shakespear"), "data.dataset='shakespear'", "did you mean 'shakespeare'"),
        (lambda: TextData(tokenizer="wordpiece"), "data.dataset.tokenizer='wordpiece'", "char, byte, sentencepiece"),
        (lambda: TextData(packing="pad"), "data.dataset.packing='pad'", "stream, documents"),
        (lambda: SentencePieceSettings(model_type="wordpiece"), "data.dataset.tokenizer.model_type='wordpiece'",
         "bpe, unigram"),
        (lambda: TextData(decode_errors="ignore"), "data.dataset.decode_errors='ignore'", "strict, replace"),
        (lambda: CopyTask(format="mlm"), "data.dataset.format='mlm'", "lm, seq2seq"),
        (lambda: TextData(document_split="sentence", packing="documents"), "data.dataset.document_split='sentence'",
         "paragraph, line"),
    ],
)  # fmt: skip
def test_unknown_names_list_the_valid_ones(make, field, listed):
    with pytest.raises(ConfigError) as e:
        make()
    assert str(e.value).startswith(f"{field}:") and listed in str(e.value)  # one format: configlib


def test_a_near_miss_of_a_closed_choice_says_what_was_meant():
    with pytest.raises(ConfigError, match="did you mean 'documents'"):
        TextData(packing="document")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(dataset="text"), "data.dataset.path=None: is required when data.dataset='text'; give"),
        (dict(dataset="parallel"), "data.dataset.dir=None: is required"),
        (dict(dataset="tfds"), "data.dataset.name=None: is required"),
        (dict(dataset="prepared"), "data.dataset.path=None: is required"),
        (dict(dataset=MixtureData()), "data.dataset.mixture=None: is required"),
        (dict(seq_len=1), "data.seq_len=1: must be >= 2"),
        (dict(prefetch=-1), "data.prefetch=-1: must be >= 0"),
    ],
)
def test_bad_values_name_field_and_fix(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        DataConfig(**kwargs)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ShakespeareData(val_fraction=1.0), "data.dataset.val_fraction=1.0: must be > 0.0 and < 1.0"),
        (lambda: SentencePieceSettings(vocab_size=100), "data.dataset.tokenizer.vocab_size=100: is too small for Sent"),
        (lambda: ParallelData(src_lang="en", tgt_lang="en"), "data.dataset.tgt_lang='en': equals"),
        (lambda: TfdsData(name="lm1b", src_lang="en"), "data.dataset.tgt_lang='en': equals"),
        (lambda: TextData(document_split="line"), "is read only with data.dataset.packing=documents"),
    ],
)  # fmt: skip
def test_a_variants_own_rules_name_its_fields(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_the_task_is_known_before_any_data_is_read():
    assert DataConfig().task == "lm" and DataConfig(dataset=ParallelData(dir="d")).task == "seq2seq"
    assert DataConfig(dataset=TfdsData(name="wmt14_translate/de-en")).task == "seq2seq"
    assert DataConfig(dataset=TfdsData(name="lm1b")).task == "lm"
    assert DataConfig(dataset=CopyTask(format="seq2seq"), seq_len=40).task == "seq2seq"
    assert DataConfig(dataset=ParallelData(dir="d", max_src_len=32)).max_src_len == 32
    with pytest.raises(ValueError, match="has no seq2seq sources"):
        DataConfig().max_src_len  # noqa: B018


def test_set_keys_follow_the_nesting():
    cfg = apply_overrides(
        DataConfig(),
        ["dataset=text", "dataset.path=a.txt", "dataset.tokenizer=sentencepiece", "dataset.tokenizer.vocab_size=500"],
    )
    assert cfg.dataset == TextData(path="a.txt", tokenizer=SentencePieceSettings(vocab_size=500))
    kept = apply_overrides(cfg, ["dataset=text", "dataset.packing=documents"])  # choosing text again keeps its fields
    assert kept.dataset == TextData(path="a.txt", tokenizer=SentencePieceSettings(vocab_size=500), packing="documents")


def test_frozen_and_replace():
    cfg = DataConfig()
    with pytest.raises(AttributeError):
        cfg.seq_len = 3  # pyright: ignore[reportAttributeAccessIssue]
    assert cfg.replace(seq_len=128).seq_len == 128 and cfg.seq_len == 64


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: CopyTask(max_src_len=99), "data.dataset.max_src_len=99: is not read when data.dataset is a lm task"),
        (lambda: TfdsData(name="lm1b", src_lang="fr"), "data.dataset.src_lang='fr': is not read"),
        (lambda: TfdsData(name="wmt14_translate/de-en", packing="documents"), "data.dataset.packing='documents'"),
    ],
)
def test_a_field_only_the_other_task_reads_is_refused(make, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        make()
    CopyTask(format="seq2seq", max_src_len=20)
    TfdsData(name="wmt14_translate/de-en", max_src_len=20, src_lang="en", tgt_lang="de")
