"""``DataConfig``: which corpus, tokenizer, sequence shapes and pipeline options.

Each field declares what it accepts (``setting``: bounds, a choice of ``data.variants``' names,
which also say which fields each choice reads, so an unknown name lists the valid ones without
importing the pipeline); the rules across fields are the small named checks below the class,
run by ``DataConfig.check``. Every error names the field and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.data.mixspec import parse_mixture, parse_schedule
from transformer_jax.data.synthetic import TASKS
from transformer_jax.data.variants import (
    DATASET_VARIANTS,
    DECODE_ERRORS,
    DOCUMENT_SPLITS,
    PACKING_VARIANTS,
    SP_MODEL_TYPES,
    TASK_FORMATS,
    TOKENIZER_VARIANTS,
)


@dataclass(frozen=True)
class DataConfig(Config):
    """Data options (``--set data.FIELD=VALUE``).

    dataset: shakespeare | text | parallel | tfds | prepared | mixture | copy | reverse | sort | associative_recall.
    path / val_path: text files (one, comma-separated, or a directory); ``val_path`` replaces the
      90/10 character split. With ``prepared``, ``path`` is a directory that ``transformer-jax
      prepare`` wrote: training streams its shards (``streaming.py``), each process its own slice of
      the documents, validation reads its ``val`` split (required), and the tokenizer is the one
      saved there (so ``tokenizer`` and its options, ``document_split`` and the split options are
      not settable with it). dir / src_lang / tgt_lang: parallel corpus ``{split}.{lang}[.gz]``.
    mixture: with ``dataset=mixture``, named prepared directories and weights,
      ``"web=/p/web:0.7,code=/p/code:0.3"`` (``mixture.py``): each row of a batch comes from one
      source, drawn with these weights (deterministic given ``seed``); all sources share one
      tokenizer; each batch row carries its ``source_ids`` and the loss is reported per source.
      mixture_schedule: later stages of weights, ``"1000:web=0.5,code=0.5;..."`` (from that step on;
      steps increase; stage 0 is ``mixture``'s weights).
    tfds_name: TFDS catalog name (``tiny_shakespeare``, ``lm1b``, ``wmt14_translate/de-en``),
      read from ``cache_dir``; ``tfds_download`` allows preparing it (needs network).
    tokenizer: char | byte | sentencepiece (``vocab_size``, ``sp_model_type``), trained on the
      first ``tokenizer_max_records`` records of the training split (SentencePiece samples
      ``sp_max_sentences`` lines of those).
    seq_len: LM tokens per row / seq2seq max target length (BOS/EOS included);
      max_src_len: seq2seq source length (EOS included).
    packing: ``stream`` (concatenate, cut windows; random offset per epoch) or ``documents``
      (first-fit packing of whole documents with segment ids; ``document_split`` says what a
      document is in a plain text corpus: blank-line ``paragraph`` or ``line``). Prepared shards:
      ``stream`` concatenates ``[BOS] doc [EOS]`` in shuffled order and cuts windows; ``documents``
      packs them, cutting a document longer than ``seq_len`` into pieces (nothing dropped).
    task_format: synthetic tasks only, ``lm`` (prompt SEP answer) or ``seq2seq``.
    max_records_in_memory: splits with at most this many records are decoded into memory once
      (fast); larger ones are read lazily from the array_record files.
    """

    dataset: str = setting("shakespeare", choice=DATASET_VARIANTS)
    path: str | None = None
    val_path: str | None = None
    val_fraction: float = setting(0.1, gt=0.0, lt=1.0)
    dir: str | None = None
    src_lang: str = "de"
    tgt_lang: str = "en"
    mixture: str | None = None
    mixture_schedule: str | None = None
    tfds_name: str | None = None
    tfds_download: bool = False
    tokenizer: str = setting("char", choice=TOKENIZER_VARIANTS)
    vocab_size: int = 8000
    sp_model_type: str = setting("bpe", choice=SP_MODEL_TYPES)
    sp_byte_fallback: bool = True
    sp_character_coverage: float = 0.9995
    sp_max_sentences: int = setting(2_000_000, ge=1)
    tokenizer_max_records: int = setting(2_000_000, ge=1)
    seq_len: int = setting(64, ge=2)  # room for BOS/EOS
    max_src_len: int = setting(64, ge=2)
    packing: str = setting("stream", choice=PACKING_VARIANTS)
    document_split: str = setting("paragraph", choice=DOCUMENT_SPLITS)
    shuffle: bool = True
    seed: int = setting(0, ge=0, lt=2**32)
    prefetch: int = setting(2, ge=0)
    read_threads: int = setting(2, ge=1)
    worker_count: int = setting(0, ge=0)
    cache_dir: str | None = None
    chunk_chars: int = setting(4096, ge=1)
    max_records_in_memory: int = setting(1_000_000, ge=1)
    decode_errors: str = setting("strict", choice=DECODE_ERRORS)
    task_format: str = setting("lm", choice=TASK_FORMATS)
    synthetic_train_size: int = setting(10000, ge=1)
    synthetic_val_size: int = setting(500, ge=1)
    synthetic_min_len: int = setting(4, ge=1)
    synthetic_max_len: int = 16
    synthetic_vocab: int = setting(16, ge=1)

    SELECTORS: ClassVar = (
        ("dataset", DATASET_VARIANTS),
        ("tokenizer", TOKENIZER_VARIANTS),
        ("packing", PACKING_VARIANTS),
    )

    PATH: ClassVar[str] = "data"

    def check(self) -> None:
        for rule in (_required_source, _mixture_schedule, _two_languages, _sentencepiece_vocab, _synthetic_sizes):
            rule(self)

    def replace(self, **changes) -> DataConfig:
        return dataclasses.replace(self, **changes)

    @property
    def task(self) -> str:
        """ "lm" or "seq2seq": what the batches will hold, known before any data is read."""
        task = DATASET_VARIANTS.get(self.dataset).task
        if task == "synthetic":
            return self.task_format
        if task == "catalog":
            return "seq2seq" if self.tfds_name and "translate" in self.tfds_name else "lm"
        return task

    @property
    def is_synthetic(self) -> bool:
        return DATASET_VARIANTS.get(self.dataset).task == "synthetic"


def _required_source(cfg: DataConfig) -> None:
    """A dataset that reads a path, a directory or a catalog name needs it given."""
    required = DATASET_VARIANTS.get(cfg.dataset).required
    if required is not None and not getattr(cfg, required[0]):
        fail(f"data.{required[0]}", getattr(cfg, required[0]), f"is required when data.dataset={cfg.dataset!r}",
             f"give {required[1]}")  # fmt: skip


def _mixture_schedule(cfg: DataConfig) -> None:
    """The schedule's stages name the mixture's sources (``mixspec`` raises naming the field)."""
    if cfg.mixture is not None:
        parse_schedule(cfg.mixture_schedule, tuple(s.name for s in parse_mixture(cfg.mixture)))


def _two_languages(cfg: DataConfig) -> None:
    if cfg.src_lang == cfg.tgt_lang:
        fail("data.tgt_lang", cfg.tgt_lang, "equals data.src_lang", "give two different language suffixes")


def _sentencepiece_vocab(cfg: DataConfig) -> None:
    """SentencePiece needs room for its pieces: 256 byte pieces with byte fallback."""
    if cfg.tokenizer != "sentencepiece":
        return
    fallback = cfg.sp_byte_fallback
    low = 300 if fallback else 8
    if cfg.vocab_size < low:
        fail(
            "data.vocab_size",
            cfg.vocab_size,
            "is too small for SentencePiece" + (" with byte fallback (256 byte pieces)" if fallback else ""),
            f"use >= {low}" + (" or set data.sp_byte_fallback=false" if fallback else ""),
        )


def _synthetic_sizes(cfg: DataConfig) -> None:
    """A synthetic task's sequences fit its vocabulary and the rows (LM or seq2seq)."""
    if cfg.dataset not in TASKS:
        return
    task = TASKS.get(cfg.dataset)
    lo, hi = cfg.synthetic_min_len, cfg.synthetic_max_len
    if lo > hi:
        fail("data.synthetic_min_len", lo, f"exceeds data.synthetic_max_len={hi}", "make min <= max")
    if cfg.synthetic_vocab < task.min_vocab(hi):
        why = f"is too small for {cfg.dataset} with synthetic_max_len={hi}"
        fail("data.synthetic_vocab", cfg.synthetic_vocab, why, f"use >= {task.min_vocab(hi)}")
    at = f"of {cfg.dataset} at synthetic_max_len={hi}"
    if cfg.task_format == "lm" and cfg.seq_len < task.lm_len(hi):
        fail(
            "data.seq_len",
            cfg.seq_len,
            f"cannot hold [BOS] prompt SEP answer {at}",
            f"use seq_len >= {task.lm_len(hi)}",
        )
    if cfg.task_format == "seq2seq":
        if cfg.max_src_len < task.prompt_len(hi) + 1:
            fail("data.max_src_len", cfg.max_src_len, f"is shorter than {task.prompt_len(hi) + 1} (prompt + EOS {at})")
        if cfg.seq_len < task.answer_len(hi) + 1:
            fail("data.seq_len", cfg.seq_len, f"is shorter than {task.answer_len(hi) + 1} (answer + EOS {at})")
