"""Weighted mixtures of prepared datasets (``data.dataset=mixture``, ``data.dataset.mixture``).

Each source is a directory of token shards (``shards.py``) streamed and packed as
``data.dataset=prepared`` streams one (``streaming.py``: this process's documents, shuffled per
epoch, repeated; each source repeats on its own). Batch k (the batch step k trains on, 0-based)
takes its B rows one by one from the sources drawn by ``draw_sources``: B independent draws with
the weights of the schedule stage in force at k, from a generator seeded by (``data.seed``,
process, k), so the draw needs no state and the iterator state is the batch counter plus each
source's grain state (a few integers each): a resumed iterator gives exactly the batches of an
uninterrupted one. Every row carries its source's index in ``source_ids`` (int32[B]), for the
per-source loss.

Validation: each source's ``val`` split (sources without one are left out), one after another,
rows tagged with their source; with a cap of rows, each source gets an equal share of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import numpy as np

from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import loader, rows
from transformer_jax.data.config import DataConfig, MixtureData, PreparedData
from transformer_jax.data.mixspec import parse_mixture, parse_schedule
from transformer_jax.data.sources import DATASETS, Corpus, prepared_corpus
from transformer_jax.data.streaming import TOKEN_PACKINGS, PreparedLM, eval_batches_of
from transformer_jax.data.tokenizers import Tokenizer

SOURCE_IDS = "source_ids"
Stages = tuple[tuple[int, np.ndarray], ...]  # (first step, normalised weights [N])


def stages_of(ds: MixtureData) -> Stages:
    """The weight schedule of ``ds``: stage 0 from ``data.dataset.mixture``, then its ``schedule``."""
    assert ds.mixture is not None  # DataConfig requires it for dataset="mixture"
    sources = parse_mixture(ds.mixture)
    later = parse_schedule(ds.schedule, tuple(s.name for s in sources))
    stages = ((0, tuple(s.weight for s in sources)), *later)
    return tuple((step, np.asarray(w, np.float64) / sum(w)) for step, w in stages)


def weights_at(stages: Stages, step: int) -> np.ndarray:
    """The weights in force at ``step`` (the last stage starting at or before it)."""
    return next(w for start, w in reversed(stages) if start <= step)


def draw_sources(stages: Stages, step: int, batch_size: int, seed: int, process_index: int) -> np.ndarray:
    """The source of each row of batch ``step``: int32[B], i.i.d. with the stage's weights."""
    cum = np.cumsum(weights_at(stages, step))
    u = np.random.default_rng([seed, process_index, step]).random(batch_size) * cum[-1]
    return np.minimum(np.searchsorted(cum, u, side="right"), len(cum) - 1).astype(np.int32)


class _MixIterator(grain.DatasetIterator):
    def __init__(self, parents: list[grain.DatasetIterator], stages: Stages, B: int, seed: int, process_index: int):
        super().__init__(parents)
        self._sources, self._stages, self._B, self._seed, self._p = parents, stages, B, seed, process_index
        self._step = 0

    def __next__(self) -> dict[str, np.ndarray]:
        ids_B = draw_sources(self._stages, self._step, self._B, self._seed, self._p)
        picked = [next(self._sources[i]) for i in ids_B]
        self._step += 1
        return {**rows.stack_rows(picked), SOURCE_IDS: ids_B}

    def get_state(self) -> dict[str, Any]:
        return {"step": self._step, "sources": [it.get_state() for it in self._sources]}

    def set_state(self, state: dict[str, Any]) -> None:
        self._step = int(state["step"])
        for it, s in zip(self._sources, state["sources"], strict=True):
            it.set_state(s)


class MixedBatches(grain.IterDataset):
    """Batches of rows drawn from ``parents`` (unbatched row datasets) by ``draw_sources``."""

    def __init__(self, parents: Sequence[grain.IterDataset], stages: Stages, B: int, seed: int, process_index: int):
        super().__init__(list(parents))
        self._stages, self._B, self._seed, self._p = stages, B, seed, process_index

    def __iter__(self) -> _MixIterator:
        return _MixIterator([p.__iter__() for p in self._parents], self._stages, self._B, self._seed, self._p)

    def __str__(self) -> str:
        return f"MixedBatches(sources={len(self._parents)}, batch_size={self._B})"


def _mixture(cfg: DataConfig) -> MixtureData:
    if not isinstance(cfg.dataset, MixtureData):
        raise TypeError(f"data.dataset={cfg.dataset.kind!r} is not a mixture")
    return cfg.dataset


def source_config(cfg: DataConfig, path: str) -> DataConfig:
    """The ``prepared`` config of one source (the mixture's packing, seed and loader options)."""
    return cfg.replace(dataset=PreparedData(path=path, packing=_mixture(cfg).packing))


@DATASETS.register("mixture")
def mixture_dataset(cfg: DataConfig) -> Corpus:
    """The sources of ``data.dataset.mixture``, each a prepared ``Corpus``, in ``info["sources"]``."""
    ds = _mixture(cfg)
    assert ds.mixture is not None  # DataConfig requires it for dataset="mixture"
    sources = {}
    for s in parse_mixture(ds.mixture):
        try:
            sources[s.name] = prepared_corpus(PreparedData(path=s.path))
        except (FileNotFoundError, ValueError) as e:
            why = str(e).removeprefix("data.dataset.path: ")
            raise ConfigError(f"data.dataset.mixture: source {s.name!r}: {why}") from None
    names = tuple(sources)
    splits: dict[str, Sequence] = {
        split: () for split in ("train", "val") if any(split in c.splits for c in sources.values())
    }
    name = f"mixture:{','.join(names)}"
    return Corpus(name, "mixture", splits, records_are_documents=True, info={"sources": sources})


def mixture_tokenizer(cfg: DataConfig, corpus: Corpus, given: Tokenizer | None) -> Tokenizer:
    """The one tokenizer the sources share; mismatched sources (or checkpoint) are refused."""
    sources: dict[str, Corpus] = corpus.info["sources"]
    if "val" not in corpus.splits:
        raise ConfigError(
            f"data.dataset.mixture: no source has a val split to validate on ({', '.join(sources)}); prepare at "
            "least one with `--val-fraction` (e.g. 0.01)"
        )
    first, tokenizer = None, None
    for name, c in sources.items():
        tok = c.info["shards"].tokenizer()
        if tokenizer is None:
            first, tokenizer = name, tok
        elif tok.to_json() != tokenizer.to_json():
            raise ConfigError(
                f"data.dataset.mixture: sources {first!r} ({tokenizer.kind}, {tokenizer.vocab_size} ids) and {name!r} "
                f"({tok.kind}, {tok.vocab_size} ids) hold different tokenizers; prepare every source with the "
                "same tokenizer (`transformer-jax prepare --tokenizer DIR/tokenizer.json`, DIR the first source)"
            )
    assert tokenizer is not None
    if given is not None and given.to_json() != tokenizer.to_json():
        raise ConfigError(
            f"data.dataset.mixture: the sources' tokenizer ({tokenizer.kind}, {tokenizer.vocab_size} ids) is not the "
            f"checkpoint's ({given.kind}, {given.vocab_size} ids): train on the sources the run was started with"
        )
    return tokenizer


class MixturePipeline(loader.Pipeline):
    """Training batches drawn from the sources' packings; evaluation per source."""

    def __init__(self, corpus: Corpus, tokenizer: Tokenizer, cfg: DataConfig):
        super().__init__(corpus, tokenizer, cfg)
        packing = TOKEN_PACKINGS.get(_mixture(cfg).packing)
        self.parts: dict[str, PreparedLM] = {
            name: packing(c, tokenizer, source_config(cfg, str(c.info["shards"].directory)))
            for name, c in corpus.info["sources"].items()
        }
        self.names = tuple(self.parts)
        self.stages = stages_of(_mixture(cfg))

    def zero_row(self) -> dict[str, np.ndarray]:
        return {**rows.lm_zero_row(self.cfg.seq_len), SOURCE_IDS: np.zeros((), np.int32)}

    def train_dataset(self, batch_size: int, process_index: int, process_count: int) -> grain.IterDataset:
        parents = [p.train_rows(batch_size, process_index, process_count) for p in self.parts.values()]
        it = MixedBatches(parents, self.stages, batch_size, self.cfg.seed, process_index)
        return loader.prefetch(it, self.cfg)

    def _with_split(self, split: str) -> list[tuple[int, PreparedLM]]:
        return [(i, p) for i, p in enumerate(self.parts.values()) if split in p.shards.splits]

    def _tagged_rows(self, split: str, cap: int | None) -> tuple[Iterator[dict[str, np.ndarray]], int]:
        parts = self._with_split(split)
        share = None if cap is None else -(-cap // len(parts))
        counts = [p.eval_row_count(split, share) for _, p in parts]
        tagged = (
            ({**row, SOURCE_IDS: np.int32(i)} for row in itertools.islice(p.eval_row_iter(split), n))
            for (i, p), n in zip(parts, counts, strict=True)
        )
        return itertools.chain.from_iterable(tagged), sum(counts)

    def rows(self, split: str) -> dict[str, np.ndarray]:
        return rows.stack_rows(list(self._tagged_rows(split, None)[0]))

    def eval_batches(
        self, split: str, batch_size: int, process_index: int, process_count: int, max_batches: int | None
    ) -> Iterator[dict[str, np.ndarray]]:
        cap = None if max_batches is None else max_batches * batch_size * process_count
        it, n = self._tagged_rows(split, cap)
        return eval_batches_of(it, n, self.zero_row(), batch_size, process_index, process_count)

    def split_size(self, split: str) -> dict[str, int]:
        sizes = [p.split_size(split) for _, p in self._with_split(split)]
        return {k: sum(s[k] for s in sizes) for k in ("examples", "tokens")}

    def fingerprint_extra(self) -> dict[str, Any]:
        return {"sources": {name: p.fingerprint_extra() for name, p in self.parts.items()}}
