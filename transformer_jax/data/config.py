"""``DataConfig``: which corpus, tokenizer, sequence shapes and pipeline options.

Validated in ``__post_init__``; every error names the field and the fix. Names (``dataset``,
``tokenizer``, ``packing``, ...) are checked against the registries that implement them, so an
unknown name lists the valid ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from transformer_jax.configlib import ConfigError
from transformer_jax.registry import unknown_name_message

SP_MODEL_TYPES = ("bpe", "unigram")
TASK_FORMATS = ("lm", "seq2seq")
DOCUMENT_SPLITS = ("paragraph", "line")
DECODE_ERRORS = ("strict", "replace")


@dataclass(frozen=True)
class DataConfig:
    """Data options (``--set data.FIELD=VALUE``).

    dataset: shakespeare | text | parallel | tfds | copy | reverse | sort | associative_recall.
    path / val_path: text files (one, comma-separated, or a directory); ``val_path`` replaces the
      90/10 character split. dir / src_lang / tgt_lang: parallel corpus ``{split}.{lang}[.gz]``.
    tfds_name: TFDS catalog name (``tiny_shakespeare``, ``lm1b``, ``wmt14_translate/de-en``),
      read from ``cache_dir``; ``tfds_download`` allows preparing it (needs network).
    tokenizer: char | byte | sentencepiece (``vocab_size``, ``sp_model_type``), trained on the
      first ``tokenizer_max_records`` records of the training split (SentencePiece samples
      ``sp_max_sentences`` lines of those).
    seq_len: LM tokens per row / seq2seq max target length (BOS/EOS included);
      max_src_len: seq2seq source length (EOS included).
    packing: ``stream`` (concatenate, cut windows; random offset per epoch) or ``documents``
      (first-fit packing of whole documents with segment ids; ``document_split`` says what a
      document is in a plain text corpus: blank-line ``paragraph`` or ``line``).
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

    def __post_init__(self):
        from transformer_jax.data.lm import PACKINGS
        from transformer_jax.data.sources import DATASETS
        from transformer_jax.data.synthetic import TASKS
        from transformer_jax.data.tokenizers import TOKENIZERS

        def choose(name: str, valid, kind: str) -> None:
            value = getattr(self, name)
            if value not in valid:
                raise ConfigError(f"data.{name}: " + unknown_name_message(kind, value, tuple(valid)))

        choose("dataset", DATASETS.names(), "dataset")
        choose("tokenizer", TOKENIZERS.names(), "tokenizer")
        choose("packing", PACKINGS.names(), "packing")
        choose("sp_model_type", SP_MODEL_TYPES, "SentencePiece model type")
        choose("task_format", TASK_FORMATS, "task format")
        choose("document_split", DOCUMENT_SPLITS, "document split")
        choose("decode_errors", DECODE_ERRORS, "decode error policy")

        required = {"text": "path", "parallel": "dir", "tfds": "tfds_name"}
        if self.dataset in required and not getattr(self, required[self.dataset]):
            need = required[self.dataset]
            hint = {"path": "a text file, comma-separated files or a directory",
                    "dir": "a directory with train.SRC/train.TGT (optionally .gz) and val.*",
                    "tfds_name": "a TFDS catalog name such as tiny_shakespeare"}[need]
            raise ConfigError(f"data.{need} is required when data.dataset={self.dataset!r}: give {hint}")
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"data.src_lang and data.tgt_lang are both {self.src_lang!r}; "
                             "give two different language suffixes")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={self.val_fraction} must be in (0, 1), e.g. 0.1")
        positive = ("seq_len", "max_src_len", "chunk_chars", "synthetic_train_size",
                    "synthetic_val_size", "synthetic_min_len", "synthetic_vocab",
                    "sp_max_sentences", "tokenizer_max_records", "read_threads",
                    "max_records_in_memory")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"data.{name}={getattr(self, name)} must be >= 1")
        for name in ("prefetch", "worker_count"):
            if getattr(self, name) < 0:
                raise ConfigError(f"data.{name}={getattr(self, name)} must be >= 0 (0 turns it off)")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"data.seed={self.seed} must be in [0, 2**32)")
        if self.seq_len < 2 or self.max_src_len < 2:
            raise ConfigError(f"data.seq_len={self.seq_len} and data.max_src_len={self.max_src_len} "
                             "must be >= 2 (room for BOS/EOS)")
        if self.tokenizer == "sentencepiece":
            fallback = self.sp_byte_fallback
            low = 300 if fallback else 8
            if self.vocab_size < low:
                raise ConfigError(
                    f"data.vocab_size={self.vocab_size} is too small for SentencePiece"
                    + (" with byte fallback (256 byte pieces)" if fallback else "")
                    + f"; use >= {low}" + (" or set data.sp_byte_fallback=false" if fallback else ""))
        if self.dataset in TASKS:
            self._check_synthetic(TASKS.get(self.dataset))

    def _check_synthetic(self, task) -> None:
        lo, hi = self.synthetic_min_len, self.synthetic_max_len
        if lo > hi:
            raise ConfigError(f"data.synthetic_min_len={lo} > data.synthetic_max_len={hi}; "
                             "make min <= max")
        if self.synthetic_vocab < task.min_vocab(hi):
            raise ConfigError(f"data.synthetic_vocab={self.synthetic_vocab} is too small for "
                             f"{self.dataset} with synthetic_max_len={hi}; use >= {task.min_vocab(hi)}")
        if self.task_format == "lm" and self.seq_len < task.lm_len(hi):
            raise ConfigError(f"data.seq_len={self.seq_len} cannot hold [BOS] prompt SEP answer of "
                             f"{self.dataset} at synthetic_max_len={hi}; use seq_len >= {task.lm_len(hi)}")
        if self.task_format == "seq2seq":
            if self.max_src_len < task.prompt_len(hi) + 1:
                raise ConfigError(f"data.max_src_len={self.max_src_len} < {task.prompt_len(hi) + 1} "
                                 f"(prompt + EOS of {self.dataset} at synthetic_max_len={hi})")
            if self.seq_len < task.answer_len(hi) + 1:
                raise ConfigError(f"data.seq_len={self.seq_len} < {task.answer_len(hi) + 1} "
                                 f"(answer + EOS of {self.dataset} at synthetic_max_len={hi})")

    def replace(self, **changes) -> DataConfig:
        return dataclasses.replace(self, **changes)

    @property
    def task(self) -> str:
        """"lm" or "seq2seq": what the batches will hold, known before any data is read."""
        if self.is_synthetic:
            return self.task_format
        if self.dataset == "parallel":
            return "seq2seq"
        if self.dataset == "tfds" and self.tfds_name and "translate" in self.tfds_name:
            return "seq2seq"
        return "lm"

    @property
    def is_synthetic(self) -> bool:
        from transformer_jax.data.synthetic import TASKS

        return self.dataset in TASKS
