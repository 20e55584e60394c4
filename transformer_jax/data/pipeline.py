"""``build_data``: corpus + tokenizer + grain pipeline -> ``Data``.

Batch formats (numpy, fixed shapes every step, ``B = batch_size``):

  LM (``task == "lm"``), ``T = seq_len``:
    inputs int32[B,T], targets int32[B,T] (inputs shifted by one), segment_ids int32[B,T]
    (0 = padding, 1.. = documents in a packed row), positions int32[B,T] (restart at 0 per
    segment), weights float32[B,T] (1 where the target is a real next token of the segment).
  seq2seq (``task == "seq2seq"``), ``S = max_src_len``, ``T = seq_len``:
    src int32[B,S], src_segment_ids int32[B,S] (1 real / 0 pad), src_positions int32[B,S],
    tgt_in int32[B,T] (BOS + y), tgt_out int32[B,T] (y + EOS), tgt_segment_ids, tgt_positions
    int32[B,T], weights float32[B,T].

Multi-process: each process reads a disjoint shard (``process_index::process_count``) of the
training examples, and of the eval rows; every process gets the same number of eval batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np

from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import loader
from transformer_jax.data.config import CorpusData, DataConfig, MixtureData, PackedText, PreparedData, SyntheticData
from transformer_jax.data.lm import PACKINGS
from transformer_jax.data.mixture import MixturePipeline, mixture_tokenizer
from transformer_jax.data.seq2seq import PromptLMPipeline, Seq2SeqPipeline
from transformer_jax.data.sources import Corpus, load_corpus
from transformer_jax.data.streaming import TOKEN_PACKINGS
from transformer_jax.data.tokenizers import SymbolTokenizer, Tokenizer, train_tokenizer


class Data:
    """The data side of a run: tokenizer, training iterator, eval batches, split sizes."""

    def __init__(
        self,
        cfg: DataConfig,
        corpus: Corpus,
        tokenizer: Tokenizer,
        task: str,
        pipeline: loader.Pipeline,
        *,
        batch_size: int,
        process_index: int,
        process_count: int,
    ):
        self.cfg, self.corpus, self.tokenizer, self.task = cfg, corpus, tokenizer, task
        self.pipeline = pipeline
        self.batch_size = batch_size
        self.process_index, self.process_count = process_index, process_count
        self.fingerprint = loader.pipeline_fingerprint(
            cfg,
            tokenizer.to_json(),
            batch_size=batch_size,
            process_index=process_index,
            process_count=process_count,
            **pipeline.fingerprint_extra(),
        )

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def sources(self) -> tuple[str, ...]:
        """The names of a mixture's sources (``batch["source_ids"]`` indexes them); () otherwise."""
        return self.pipeline.names if isinstance(self.pipeline, MixturePipeline) else ()

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.corpus.splits)

    def batch_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{name: (shape, dtype)}`` of every batch (for abstract inputs / shardings)."""
        return {k: ((self.batch_size, *v.shape), v.dtype) for k, v in self.pipeline.zero_row().items()}

    def train_iterator(self, state: dict[str, Any] | None = None) -> loader.DataIterator:
        """Infinite, deterministic, per-process, prefetched, checkpointable batches."""
        it = loader.DataIterator(
            self.pipeline.train_dataset(self.batch_size, self.process_index, self.process_count), self.fingerprint
        )
        if state is not None:
            it.set_state(state)
        return it

    def eval_batches(self, split: str = "val", max_batches: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """One deterministic pass over ``split`` in order; the last batch is padded (weight 0)."""
        split = "val" if split == "validation" else split
        return self.pipeline.eval_batches(split, self.batch_size, self.process_index, self.process_count, max_batches)

    @cached_property
    def split_sizes(self) -> dict[str, dict[str, int]]:
        """``{split: {"examples": rows/windows/pairs, "tokens": ...}}`` (tokenizes on first use)."""
        return {split: self.pipeline.split_size(split) for split in self.corpus.splits}

    def __repr__(self) -> str:
        return (
            f"Data({self.corpus.name}, task={self.task}, vocab_size={self.vocab_size}, "
            f"batch={self.batch_size}, process={self.process_index}/{self.process_count})"
        )


def build_data(
    cfg: DataConfig,
    *,
    batch_size: int,
    tokenizer: Tokenizer | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> Data:
    """Prepare the corpus (TFDS array_record, cached), train the tokenizer on the training split
    unless one is given (e.g. restored from a checkpoint), and set up the pipelines."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} must be in [0, process_count={process_count})")
    corpus = load_corpus(cfg)
    ds = cfg.dataset
    if isinstance(ds, MixtureData):
        tokenizer = mixture_tokenizer(cfg, corpus, tokenizer)
        task, pipeline_cls = "lm", MixturePipeline
    elif isinstance(ds, PreparedData):
        tokenizer = _prepared_tokenizer(ds, corpus, tokenizer)
        task, pipeline_cls = "lm", TOKEN_PACKINGS.get(ds.packing)
    elif isinstance(ds, SyntheticData):
        tokenizer = tokenizer or SymbolTokenizer(ds.vocab)
        task = ds.format
        pipeline_cls = PromptLMPipeline if task == "lm" else Seq2SeqPipeline
    else:
        assert isinstance(ds, CorpusData)
        if tokenizer is None:
            tokenizer = train_tokenizer(ds.tokenizer, corpus.tokenizer_texts(ds.tokenizer.records()), cfg.seed)
        task = corpus.kind
        pipeline_cls = PACKINGS.get(ds.packing) if isinstance(ds, PackedText) and task == "lm" else Seq2SeqPipeline
    pipeline = pipeline_cls(corpus, tokenizer, cfg)
    return Data(
        cfg,
        corpus,
        tokenizer,
        task,
        pipeline,
        batch_size=batch_size,
        process_index=process_index,
        process_count=process_count,
    )


def _prepared_tokenizer(ds: PreparedData, corpus: Corpus, given: Tokenizer | None) -> Tokenizer:
    """The tokenizer saved with the shards; one given (a checkpoint's) must be the same."""
    shards = corpus.info["shards"]
    if "val" not in shards.splits:
        raise ConfigError(
            f"data.dataset.path={ds.path} has no val split to validate on; prepare the corpus again with "
            "`--val-fraction` (e.g. 0.01) into another --out"
        )
    tokenizer = shards.tokenizer()
    if given is not None and given.to_json() != tokenizer.to_json():
        raise ConfigError(
            f"data.dataset.path={ds.path} holds another tokenizer ({tokenizer.kind}, {tokenizer.vocab_size} ids) than "
            f"the checkpoint ({given.kind}, {given.vocab_size} ids): train on the shards the run was started "
            "with, or start a new run in another workdir"
        )
    return tokenizer
