"""Translating a corpus with a trained EncoderDecoder and scoring it with corpus BLEU.

Sentences are sorted by length and decoded in fixed-shape batches (source lengths rounded up
to ``length_bucket``, the last batch padded with dummy rows), so a whole split compiles a
handful of programs; the output is returned in the input order.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import ClassVar

import jax
import numpy as np

from transformer_jax.core.configlib import Config, Variant, fail, setting, variant
from transformer_jax.core.registry import Registry
from transformer_jax.core.tokens import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.decode import Greedy, SamplingConfig, translate, translate_beam
from transformer_jax.eval.bleu import corpus_bleu


class TranslateSearch(Variant):
    """How a translation is searched for: `Beam` or `Sampled` (token by token), chosen by name."""

    PATH = "translate.search"
    VARIANTS: typing.ClassVar[Registry[type[TranslateSearch]]] = Registry("translation search")


@variant("beam")
@dataclasses.dataclass(frozen=True)
class Beam(TranslateSearch):
    """Beam search of width ``size`` with the GNMT length penalty ``alpha`` (Wu et al. 2016; 0: none)."""

    size: int = setting(4, ge=1)
    alpha: float = 0.6


@variant("sampled")
@dataclasses.dataclass(frozen=True)
class Sampled(TranslateSearch):
    """Token by token, each chosen by ``sampling`` (default greedy); the random draws of batch b
    use ``fold_in(key(seed), b)``."""

    sampling: SamplingConfig = Greedy()
    seed: int = 0

    def check(self) -> None:
        if isinstance(self.sampling, Greedy) and self.seed:
            fail(
                "translate.search.seed",
                self.seed,
                "greedy decoding draws nothing, so the seed is not read",
                "leave it 0, or choose a sampling strategy",
            )


def search_for(beam_size: int, alpha: float = 0.6) -> TranslateSearch:
    """The command line's search: beam width ``beam_size``, where 1 means greedy."""
    return Sampled() if beam_size == 1 else Beam(size=beam_size, alpha=alpha)


@dataclasses.dataclass(frozen=True)
class TranslateConfig(Config):
    """``search``: `Beam` (default) or `Sampled`; ``batch_size`` sentences per call; sources are
    cut to ``max_src_len`` tokens (EOS included); at most ``min(max_new_tokens, len_a * source
    bucket + len_b)`` target tokens (EOS included)."""

    search: TranslateSearch = Beam()
    batch_size: int = setting(64, ge=1)
    max_src_len: int = setting(128, ge=1)
    max_new_tokens: int = setting(128, ge=1)
    len_a: float = 1.5
    len_b: int = 10
    length_bucket: int = setting(16, ge=1)

    PATH: ClassVar[str] = "translate"


def _source_ids(ids: Sequence[int], max_src_len: int) -> list[int]:
    return list(ids)[: max_src_len - 1] + [EOS_ID]


def translate_ids(
    graphdef, params, sources: Sequence[Sequence[int]], cfg: TranslateConfig = TranslateConfig()
) -> list[list[int]]:
    """The best translation (token ids, without BOS/EOS/padding) of each source (ids without EOS)."""
    srcs = [_source_ids(s, cfg.max_src_len) for s in sources]
    order = sorted(range(len(srcs)), key=lambda i: -len(srcs[i]))
    out: list[list[int]] = [[] for _ in srcs]
    for lo in range(0, len(order), cfg.batch_size):
        idx = order[lo : lo + cfg.batch_size]
        bucket = min(cfg.max_src_len, -(-len(srcs[idx[0]]) // cfg.length_bucket) * cfg.length_bucket)
        src = np.zeros((cfg.batch_size, bucket), np.int32)
        src[:, 0] = EOS_ID  # dummy rows of a short last batch
        for r, i in enumerate(idx):
            src[r, : len(srcs[i])] = srcs[i]
        n_new = max(1, min(cfg.max_new_tokens, int(cfg.len_a * bucket) + cfg.len_b))
        search = cfg.search
        if isinstance(search, Beam):
            tokens = translate_beam(
                graphdef,
                params,
                src_BS=src,
                max_new_tokens=n_new,
                beam_size=search.size,
                alpha=search.alpha,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
            ).tokens[:, 0]
        else:
            assert isinstance(search, Sampled)
            tokens = translate(
                graphdef,
                params,
                src_BS=src,
                max_new_tokens=n_new,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                sampling=search.sampling,
                key=jax.random.fold_in(jax.random.key(search.seed), lo),
            ).tokens
        tokens = np.asarray(jax.device_get(tokens))
        for r, i in enumerate(idx):
            out[i] = [int(t) for t in tokens[r] if t not in (PAD_ID, BOS_ID, EOS_ID)]
    return out


def translate_texts(
    graphdef, params, tokenizer, texts: Sequence[str], cfg: TranslateConfig = TranslateConfig()
) -> list[str]:
    """Detokenized translations of ``texts`` (one line each)."""
    ids = translate_ids(graphdef, params, [tokenizer.encode(t) for t in texts], cfg)
    return [tokenizer.decode(x).replace("\n", " ") for x in ids]


def reference_pairs(data, split: str = "val", max_examples: int | None = None) -> tuple[list[list[int]], list[str]]:
    """(source token ids, reference text) of a seq2seq ``Data`` split: the raw corpus pairs
    (synthetic tasks: their symbols, references written by the tokenizer)."""
    split = "val" if split == "validation" else split
    examples = data.corpus.split(split)
    n = len(examples) if max_examples is None else min(max_examples, len(examples))
    tok = data.tokenizer
    sources, refs = [], []
    for i in range(n):
        src, tgt = examples[i]
        if data.corpus.kind == "synthetic":
            sources.append(tok.symbol_ids(src))
            refs.append(tok.decode(tok.symbol_ids(tgt)))
        else:
            sources.append(tok.encode(src))
            refs.append(tgt)
    return sources, refs


def bleu_on_split(
    graphdef,
    params,
    data,
    split: str = "val",
    cfg: TranslateConfig = TranslateConfig(),
    max_examples: int | None = None,
) -> dict:
    """Corpus BLEU of the model's translations of ``split`` against its references."""
    sources, refs = reference_pairs(data, split, max_examples)
    hyps = [data.tokenizer.decode(x).replace("\n", " ") for x in translate_ids(graphdef, params, sources, cfg)]
    beam_size = cfg.search.size if isinstance(cfg.search, Beam) else 1
    return {**corpus_bleu(hyps, refs), "sentences": len(refs), "beam_size": beam_size}


def run_translate_config(run, *, search: TranslateSearch, batch_size: int = 64) -> TranslateConfig:
    """A TranslateConfig fitted to a run's shapes: sources cut like in training
    (``data.dataset.max_src_len``), translations of at most ``data.seq_len`` tokens (EOS included)."""
    d, m = run.cfg.data, run.cfg.model
    n_new = d.seq_len if m.position.kind != "learned" else min(d.seq_len, m.dims.max_len - 1)
    return TranslateConfig(search=search, batch_size=batch_size, max_src_len=d.max_src_len, max_new_tokens=n_new)


def validation_bleu(
    run, state, split: str = "val", max_batches: int | None = None, *, search: TranslateSearch = Sampled()
) -> dict:
    """The seq2seq layout's extra validation metric (``eval.task_metrics``): ``{"bleu": ...}`` of
    ``state`` on ``split`` (greedy by default, to keep validation cheap); ``max_batches``
    (``train.eval.batches``) limits it to the first ``max_batches * train.batch_size`` sentences."""
    limit = None if max_batches is None else max_batches * run.cfg.train.batch_size
    cfg = run_translate_config(run, search=search)
    result = bleu_on_split(run.graphdef, (state.params, state.model_state), run.data, split, cfg, limit)
    return {"bleu": result["bleu"]}
