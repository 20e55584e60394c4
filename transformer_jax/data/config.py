"""``DataConfig``: which corpus, tokenizer, sequence shapes and pipeline options.

Validated in ``__post_init__``; every error names the field and the fix. Names (``dataset``,
``tokenizer``, ``packing``, ...) are checked against ``data.variants``, which also says which
fields each choice reads, so an unknown name lists the valid ones without importing the pipeline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from transformer_jax.core.configlib import ConfigError, check_choice, check_int, check_types, fail
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
class DataConfig:
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

    dataset: str = "shakespeare"
    path: str | None = None
    val_path: str | None = None
    val_fraction: float = 0.1
    dir: str | None = None
    src_lang: str = "de"
    tgt_lang: str = "en"
    mixture: str | None = None
    mixture_schedule: str | None = None
    tfds_name: str | None = None
    tfds_download: bool = False
    tokenizer: str = "char"
    vocab_size: int = 8000
    sp_model_type: str = "bpe"
    sp_byte_fallback: bool = True
    sp_character_coverage: float = 0.9995
    sp_max_sentences: int = 2_000_000
    tokenizer_max_records: int = 2_000_000
    seq_len: int = 64
    max_src_len: int = 64
    packing: str = "stream"
    document_split: str = "paragraph"
    shuffle: bool = True
    seed: int = 0
    prefetch: int = 2
    read_threads: int = 2
    worker_count: int = 0
    cache_dir: str | None = None
    chunk_chars: int = 4096
    max_records_in_memory: int = 1_000_000
    decode_errors: str = "strict"
    task_format: str = "lm"
    synthetic_train_size: int = 10000
    synthetic_val_size: int = 500
    synthetic_min_len: int = 4
    synthetic_max_len: int = 16
    synthetic_vocab: int = 16

    SELECTORS: ClassVar = (
        ("dataset", DATASET_VARIANTS),
        ("tokenizer", TOKENIZER_VARIANTS),
        ("packing", PACKING_VARIANTS),
    )

    def __post_init__(self):
        check_types(self, "data")
        check_choice("data.dataset", self.dataset, DATASET_VARIANTS)
        check_choice("data.tokenizer", self.tokenizer, TOKENIZER_VARIANTS)
        check_choice("data.packing", self.packing, PACKING_VARIANTS)
        check_choice("data.sp_model_type", self.sp_model_type, SP_MODEL_TYPES, "SentencePiece model type")
        check_choice("data.task_format", self.task_format, TASK_FORMATS, "task format")
        check_choice("data.document_split", self.document_split, DOCUMENT_SPLITS, "document split")
        check_choice("data.decode_errors", self.decode_errors, DECODE_ERRORS, "decode error policy")
        required = DATASET_VARIANTS.get(self.dataset).required
        if required is not None and not getattr(self, required[0]):
            raise ConfigError(f"data.{required[0]} is required when data.dataset={self.dataset!r}: give {required[1]}")
        if self.mixture is not None:
            parse_schedule(self.mixture_schedule, tuple(s.name for s in parse_mixture(self.mixture)))
        if self.src_lang == self.tgt_lang:
            fail("data.tgt_lang", self.tgt_lang, "equals data.src_lang", "give two different language suffixes")
        if not 0.0 < self.val_fraction < 1.0:
            fail("data.val_fraction", self.val_fraction, "must be in (0, 1)", "e.g. 0.1")
        positive = ("seq_len", "max_src_len", "chunk_chars", "synthetic_train_size", "synthetic_val_size",
                    "synthetic_min_len", "synthetic_vocab", "sp_max_sentences", "tokenizer_max_records",
                    "read_threads", "max_records_in_memory")  # fmt: skip
        for name in positive:
            check_int(f"data.{name}", getattr(self, name), low=1)
        for name in ("prefetch", "worker_count"):
            check_int(f"data.{name}", getattr(self, name), low=0)
        check_int("data.seed", self.seed, low=0)
        if self.seed >= 2**32:
            fail("data.seed", self.seed, "must be in [0, 2**32)")
        if self.seq_len < 2 or self.max_src_len < 2:
            raise ConfigError(
                f"data.seq_len={self.seq_len} and data.max_src_len={self.max_src_len} must be >= 2 (room for BOS/EOS)"
            )
        if self.tokenizer == "sentencepiece":
            fallback = self.sp_byte_fallback
            low = 300 if fallback else 8
            if self.vocab_size < low:
                raise ConfigError(
                    f"data.vocab_size={self.vocab_size} is too small for SentencePiece"
                    + (" with byte fallback (256 byte pieces)" if fallback else "")
                    + f"; use >= {low}"
                    + (" or set data.sp_byte_fallback=false" if fallback else "")
                )
        if self.dataset in TASKS:
            self._check_synthetic(TASKS.get(self.dataset))

    def _check_synthetic(self, task) -> None:
        lo, hi = self.synthetic_min_len, self.synthetic_max_len
        if lo > hi:
            raise ConfigError(f"data.synthetic_min_len={lo} > data.synthetic_max_len={hi}; make min <= max")
        if self.synthetic_vocab < task.min_vocab(hi):
            raise ConfigError(
                f"data.synthetic_vocab={self.synthetic_vocab} is too small for "
                f"{self.dataset} with synthetic_max_len={hi}; use >= {task.min_vocab(hi)}"
            )
        if self.task_format == "lm" and self.seq_len < task.lm_len(hi):
            raise ConfigError(
                f"data.seq_len={self.seq_len} cannot hold [BOS] prompt SEP answer of "
                f"{self.dataset} at synthetic_max_len={hi}; use seq_len >= {task.lm_len(hi)}"
            )
        if self.task_format == "seq2seq":
            if self.max_src_len < task.prompt_len(hi) + 1:
                raise ConfigError(
                    f"data.max_src_len={self.max_src_len} < {task.prompt_len(hi) + 1} "
                    f"(prompt + EOS of {self.dataset} at synthetic_max_len={hi})"
                )
            if self.seq_len < task.answer_len(hi) + 1:
                raise ConfigError(
                    f"data.seq_len={self.seq_len} < {task.answer_len(hi) + 1} "
                    f"(answer + EOS of {self.dataset} at synthetic_max_len={hi})"
                )

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
