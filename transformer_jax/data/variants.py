"""The data choices by name (``data.dataset``, ``data.tokenizer``, ``data.packing``, and the
smaller ones) and the ``DataConfig`` fields each reads, so that ``DataConfig`` validates names
without importing the pipeline. The pipeline registers its implementations under the same names (``sources.DATASETS``,
``tokenizers.TOKENIZERS``, ``lm.PACKINGS``); a test keeps the two in step.
"""

from __future__ import annotations

import dataclasses
import re

from transformer_jax.core.registry import Registry
from transformer_jax.data.synthetic import TASKS


@dataclasses.dataclass(frozen=True)
class DatasetVariant:
    """``task``: ``lm`` | ``seq2seq`` | ``synthetic`` (``data.task_format`` decides) | ``catalog``
    (TFDS: seq2seq for translation catalogs, else lm); ``required``: the field that must be set and
    what to give it."""

    task: str
    required: tuple[str, str] | None = None


_CORPUS = ("tokenizer", "tokenizer_max_records", "decode_errors", "cache_dir", "max_records_in_memory")
_TEXT = (*_CORPUS, "packing", "document_split", "val_path", "val_fraction", "chunk_chars")
_SYNTHETIC = ("task_format", "synthetic_train_size", "synthetic_val_size", "synthetic_min_len",
              "synthetic_max_len", "synthetic_vocab")  # fmt: skip

DATASET_VARIANTS: Registry[DatasetVariant] = Registry("dataset")
DATASET_VARIANTS.register("shakespeare", DatasetVariant("lm"), reads=_TEXT)
DATASET_VARIANTS.register(
    "text", DatasetVariant("lm", ("path", "a text file, comma-separated files or a directory")), reads=(*_TEXT, "path")
)
DATASET_VARIANTS.register(
    "parallel",
    DatasetVariant("seq2seq", ("dir", "a directory with train.SRC/train.TGT (optionally .gz) and val.*")),
    reads=(*_CORPUS, "dir", "src_lang", "tgt_lang", "val_fraction"),
)
DATASET_VARIANTS.register(
    "tfds",
    DatasetVariant("catalog", ("tfds_name", "a TFDS catalog name such as tiny_shakespeare")),
    reads=(*_CORPUS, "packing", "document_split", "tfds_name", "tfds_download", "src_lang", "tgt_lang"),
)
DATASET_VARIANTS.register(  # tokenizer, documents and splits were fixed by `prepare`: none is read here
    "prepared",
    DatasetVariant("lm", ("path", "a directory written by `transformer-jax prepare`")),
    reads=("path", "packing"),
)
DATASET_VARIANTS.register(  # each source is a prepared directory: as `prepared`, nothing else is read
    "mixture",
    DatasetVariant("lm", ("mixture", "NAME=PATH:WEIGHT,... of directories written by `transformer-jax prepare`")),
    reads=("mixture", "mixture_schedule", "packing"),
)
for _task in TASKS:
    DATASET_VARIANTS.register(_task, DatasetVariant("synthetic"), reads=_SYNTHETIC)

TOKENIZER_VARIANTS: Registry[str] = Registry("tokenizer")
TOKENIZER_VARIANTS.register("char", "one id per character of the training split")
TOKENIZER_VARIANTS.register("byte", "one id per UTF-8 byte")
TOKENIZER_VARIANTS.register(
    "sentencepiece",
    "BPE or unigram pieces trained on the training split",
    reads=("vocab_size", "sp_model_type", "sp_byte_fallback", "sp_character_coverage", "sp_max_sentences"),
)
TOKENIZER_VARIANTS.register("symbols", "the synthetic tasks' symbols (set by them)")

PACKING_VARIANTS: Registry[str] = Registry("packing")
PACKING_VARIANTS.register("stream", "concatenate the split, cut windows (random offset per epoch)")
PACKING_VARIANTS.register("documents", "first-fit packing of whole documents", reads=("document_split",))

SP_MODEL_TYPES: Registry[str] = Registry("SentencePiece model type")
SP_MODEL_TYPES.register("bpe", "byte-pair encoding (Sennrich et al. 2016)")
SP_MODEL_TYPES.register("unigram", "unigram LM (Kudo 2018)")

TASK_FORMATS: Registry[str] = Registry("task format")
TASK_FORMATS.register("lm", "one row: [BOS] prompt SEP answer, loss on the answer")
TASK_FORMATS.register("seq2seq", "prompt to the encoder, answer to the decoder")

DECODE_ERRORS: Registry[str] = Registry("decode error policy")
DECODE_ERRORS.register("strict", "non-UTF-8 bytes are an error naming the file")
DECODE_ERRORS.register("replace", "non-UTF-8 bytes become U+FFFD, with one warning naming the files")

DOCUMENT_SPLITS: Registry = Registry("document split")
DOCUMENT_SPLITS.register("paragraph", lambda text: re.split(r"\n[ \t]*\n", text))  # blank-line separated
DOCUMENT_SPLITS.register("line", lambda text: text.split("\n"))
