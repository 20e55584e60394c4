"""One-example-per-row pipelines: translation pairs and the synthetic tasks.

  - ``Seq2SeqPipeline``: ``(src, tgt)`` text pairs (or synthetic ``(prompt, answer)`` symbol
    lists) -> seq2seq rows (``src`` + EOS in S, ``tgt_in = BOS + y``, ``tgt_out = y + EOS`` in
    T), truncated with one warning.
  - ``PromptLMPipeline``: synthetic ``(prompt, answer)`` -> LM rows ``[BOS] prompt SEP answer``
    with weights only on the answer tokens.

Training: shard -> shuffle per epoch -> repeat -> row -> batch(drop_remainder) -> threads ->
prefetch. Eval: every example once, in order.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, cast

import grain
import numpy as np

from transformer_jax.data import loader, rows
from transformer_jax.data.tokenizers import SymbolTokenizer, Tokenizer


class _Seq2SeqRow:
    def __init__(self, tokenizer: Tokenizer, S: int, T: int, synthetic: bool, warn: rows.WarnOnce):
        self.tokenizer, self.S, self.T, self.synthetic, self.warn = tokenizer, S, T, synthetic, warn

    def encode(self, example: Any) -> tuple[list[int], list[int]]:
        if self.synthetic:
            prompt, answer = example
            tok = cast(SymbolTokenizer, self.tokenizer)  # row_fn checked it
            return tok.symbol_ids(prompt), tok.symbol_ids(answer)
        src, tgt = example
        return self.tokenizer.encode(src), self.tokenizer.encode(tgt)

    def __call__(self, example: Any) -> dict[str, np.ndarray]:
        src, tgt = self.encode(example)
        return rows.seq2seq_row(src, tgt, self.S, self.T, self.warn)


class _PromptLMRow:
    def __init__(self, tokenizer: SymbolTokenizer, T: int):
        self.tokenizer, self.T = tokenizer, T

    def __call__(self, example: tuple[list[int], list[int]]) -> dict[str, np.ndarray]:
        prompt, answer = example
        tok = self.tokenizer
        return rows.prompt_lm_row(tok.symbol_ids(prompt), tok.sep_id, tok.symbol_ids(answer), self.T)


class _ExamplePipeline(loader.Pipeline):
    @abc.abstractmethod
    def row_fn(self) -> Callable[[Any], dict[str, np.ndarray]]:
        """The callable turning one example into one row."""

    def examples(self, split: str) -> Sequence:
        return self.corpus.split(split)

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        ds, _ = loader.epochs(self.examples("train"), self.cfg)
        ds = loader.process_rows(ds, batch_size, process_index, process_count)
        ds = ds.map(self.row_fn()).batch(batch_size, drop_remainder=True)
        return loader.prefetch(loader.to_iter(ds, self.cfg), self.cfg)

    def rows(self, split: str) -> dict[str, np.ndarray]:
        make = self.row_fn()
        examples = self.examples(split)
        if len(examples) == 0:
            raise ValueError(f"split {split!r} of {self.corpus.name} is empty")
        return rows.stack_rows([make(examples[i]) for i in range(len(examples))])


class Seq2SeqPipeline(_ExamplePipeline):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._warn = rows.WarnOnce(
            f"some pairs are longer than data.dataset.max_src_len={self.cfg.max_src_len} (source + EOS) "
            f"or data.seq_len={self.cfg.seq_len} (target + BOS/EOS) and were truncated; raise "
            "them to keep pairs whole (warned once)"
        )

    def zero_row(self) -> dict[str, np.ndarray]:
        return rows.seq2seq_zero_row(self.cfg.max_src_len, self.cfg.seq_len)

    def row_fn(self) -> _Seq2SeqRow:
        if self.corpus.kind == "synthetic" and not isinstance(self.tokenizer, SymbolTokenizer):
            raise TypeError(f"synthetic tasks need a SymbolTokenizer, got {self.tokenizer!r}")
        return _Seq2SeqRow(
            self.tokenizer, self.cfg.max_src_len, self.cfg.seq_len, self.corpus.kind == "synthetic", self._warn
        )


class PromptLMPipeline(_ExamplePipeline):
    def zero_row(self) -> dict[str, np.ndarray]:
        return rows.lm_zero_row(self.cfg.seq_len)

    def row_fn(self) -> _PromptLMRow:
        if not isinstance(self.tokenizer, SymbolTokenizer):
            raise TypeError(f"synthetic tasks need a SymbolTokenizer, got {self.tokenizer!r}")
        return _PromptLMRow(self.tokenizer, self.cfg.seq_len)
