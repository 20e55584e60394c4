"""Data: TFDS builders (array_record, no TensorFlow), tokenizers, grain pipelines, synthetic tasks.

    from transformer_jax.data import DataConfig, SentencePieceSettings, TextData, build_data
    data = build_data(DataConfig(dataset="shakespeare"), batch_size=12)   # char tokenizer
    cfg = DataConfig(dataset=TextData(path="corpus.txt", tokenizer=SentencePieceSettings(vocab_size=8000)))
    it = data.train_iterator(); batch = next(it); state = it.get_state()   # JSON-able
    for batch in data.eval_batches("val"): ...

Batch formats are documented in ``pipeline.py``; modules: ``config`` (DataConfig, one settings
class per dataset), ``tokenizer_config`` (one settings class per trained tokenizer),
``builders`` (TFDS builders), ``sources`` (datasets by name), ``tokenizers``, ``lm`` /
``seq2seq`` (pipelines), ``prepare`` / ``shards`` (token shards) and ``streaming`` (training on them,
``data.dataset=prepared``), ``synthetic``, ``shakespeare`` (offline corpus), ``bench``.
"""

from transformer_jax.data.config import (
    AssociativeRecallTask,
    CopyTask,
    DataConfig,
    DatasetConfig,
    MixtureData,
    ParallelData,
    PreparedData,
    ReverseTask,
    ShakespeareData,
    SortTask,
    TextData,
    TfdsData,
)
from transformer_jax.data.hf_tokenizer import HFTokenizer
from transformer_jax.data.loader import DataIterator
from transformer_jax.data.pipeline import Data, build_data
from transformer_jax.data.shakespeare import SHAKESPEARE_PLAYS, shakespeare_text, write_shakespeare
from transformer_jax.data.sources import DATASETS
from transformer_jax.data.tokenizer_config import ByteSettings, CharSettings, SentencePieceSettings, TokenizerConfig
from transformer_jax.data.tokenizers import (
    TOKENIZERS,
    ByteTokenizer,
    CharTokenizer,
    SentencePieceTokenizer,
    SymbolTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_from_json,
    train_tokenizer,
)

__all__ = [
    "DATASETS",
    "SHAKESPEARE_PLAYS",
    "TOKENIZERS",
    "AssociativeRecallTask",
    "ByteSettings",
    "ByteTokenizer",
    "CharSettings",
    "CharTokenizer",
    "CopyTask",
    "Data",
    "DataConfig",
    "DataIterator",
    "DatasetConfig",
    "HFTokenizer",
    "MixtureData",
    "ParallelData",
    "PreparedData",
    "ReverseTask",
    "SentencePieceSettings",
    "SentencePieceTokenizer",
    "ShakespeareData",
    "SortTask",
    "SymbolTokenizer",
    "TextData",
    "TfdsData",
    "Tokenizer",
    "TokenizerConfig",
    "build_data",
    "load_tokenizer",
    "shakespeare_text",
    "tokenizer_from_json",
    "train_tokenizer",
    "write_shakespeare",
]
