"""Datasets by name: each entry of ``DATASETS`` turns a ``DataConfig`` into a ``Corpus``; the names
are those of the dataset settings (``config.DatasetConfig.VARIANTS``).

A ``Corpus`` gives random-access, decoded records per split (``train``, ``val``, maybe ``test``):
  - ``kind="lm"``: ``str`` records. Either documents (``records_are_documents``, e.g. lm1b
    sentences) or ordered chunks of one text (our text builder), joined with ``joiner``.
  - ``kind="seq2seq"``: ``(src, tgt)`` string pairs.
  - ``kind="synthetic"``: ``(prompt, answer)`` symbol lists (see ``synthetic.py``).
  - ``kind="tokens"``: documents as token-id arrays read lazily from prepared shards
    (``shards.TokenShards`` in ``info["shards"]``, which also holds the tokenizer).
TFDS is imported only when a TFDS-backed dataset is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from transformer_jax.core.paths import require_local
from transformer_jax.core.registry import Registry
from transformer_jax.data import shakespeare, synthetic
from transformer_jax.data.config import (
    CorpusData,
    DataConfig,
    DatasetConfig,
    ParallelData,
    PreparedData,
    ShakespeareData,
    SyntheticData,
    TextData,
    TfdsData,
)

_D = TypeVar("_D", bound=DatasetConfig)

DATASETS: Registry[Callable[[DataConfig], Corpus]] = Registry("dataset")


class Decoded(Sequence):
    """A lazy view of a TFDS data source decoding each record with ``fn``.

    A single random read costs about 250 us (array_record read + TFDS example parsing); reads
    in blocks (``__iter__``, ``__getitems__``) about 40 us per record.
    """

    _BLOCK = 1024

    def __init__(self, source: Any, fn: Callable[[dict], Any]):
        self.source, self.fn = source, fn

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.__getitems__(list(range(*i.indices(len(self)))))
        return self.fn(self.source[i])

    def __getitems__(self, indices: Sequence[int]) -> list:
        return [self.fn(r) for r in self.source.__getitems__(list(indices))] if indices else []

    def __iter__(self) -> Iterator:
        for lo in range(0, len(self), self._BLOCK):
            yield from self.__getitems__(range(lo, min(lo + self._BLOCK, len(self))))


@dataclass
class Corpus:
    name: str
    kind: str  # "lm" | "seq2seq" | "synthetic"
    splits: dict[str, Sequence]
    records_are_documents: bool = False
    joiner: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> Sequence:
        if name not in self.splits:
            raise KeyError(f"{self.name} has no split {name!r}; it has: {', '.join(self.splits)}")
        return self.splits[name]

    def text(self, split: str) -> str:
        """The whole split as one string (LM corpora)."""
        return self.joiner.join(self.split(split))

    def tokenizer_texts(self, max_records: int | None = None) -> Iterator[str]:
        """The training split's text (its first ``max_records`` records), the only input a
        tokenizer may be trained on."""
        train = self.split("train")
        for i, record in enumerate(train):
            if max_records is not None and i >= max_records:
                break
            if self.kind == "seq2seq":
                yield from record
            else:
                yield record


def _text_record(r: dict) -> str:
    return r["text"].decode("utf-8")


def _builder_splits(builder, fn: Callable[[dict], Any], ds: CorpusData) -> dict[str, Sequence]:
    """Decoded splits; those of at most ``max_records_in_memory`` records are read into a list
    once (fast random access), larger ones stay lazy on the array_record files."""
    from transformer_jax.data import builders

    out: dict[str, Sequence] = {}
    for ours, theirs in (("train", "train"), ("val", "validation"), ("test", "test")):
        if theirs in builder.info.splits:
            records = Decoded(builders.data_source(builder, theirs), fn)
            out[ours] = list(records) if len(records) <= ds.max_records_in_memory else records
    return out


def _text_corpus(ds: ShakespeareData | TextData, path: str, name: str, val_path: str | None, errors: str) -> Corpus:
    from transformer_jax.data import builders

    builder = builders.build_text_corpus(
        path,
        val_path=val_path,
        val_fraction=ds.val_fraction,
        decode_errors=errors,
        chunk_chars=ds.chunk_chars,
        cache_dir=ds.cache_dir,
    )
    return Corpus(name, "lm", _builder_splits(builder, _text_record, ds), info={"data_dir": str(builder.data_dir)})


def _settings(cfg: DataConfig, cls: type[_D]) -> _D:
    if not isinstance(cfg.dataset, cls):
        raise TypeError(f"data.dataset={cfg.dataset.kind!r} is not a {cls.__name__}")
    return cfg.dataset


@DATASETS.register("shakespeare")
def shakespeare_dataset(cfg: DataConfig) -> Corpus:
    """The offline quickstart corpus (``shakespeare.py``), 90/10 by characters."""
    from transformer_jax.data import builders

    ds = _settings(cfg, ShakespeareData)
    root = Path(ds.cache_dir).expanduser() if ds.cache_dir else builders.default_cache_dir()
    path = root / "shakespeare" / shakespeare.corpus_fingerprint() / "input.txt"
    if not path.is_file():
        tmp = shakespeare.write_shakespeare(path.with_suffix(".tmp"))
        tmp.replace(path)
    corpus = _text_corpus(ds, str(path), "shakespeare", None, "strict")
    corpus.info["plays"] = shakespeare.SHAKESPEARE_PLAYS
    return corpus


@DATASETS.register("text")
def text_dataset(cfg: DataConfig) -> Corpus:
    """Local UTF-8 text files (``data.dataset.path``), 90/10 by characters unless ``val_path``."""
    ds = _settings(cfg, TextData)
    assert ds.path is not None  # DataConfig requires it for dataset="text"
    return _text_corpus(ds, ds.path, "text", ds.val_path, ds.decode_errors)


@DATASETS.register("parallel")
def parallel_dataset(cfg: DataConfig) -> Corpus:
    """Aligned files ``{train,val,test}.{lang}[.gz]`` in ``data.dataset.dir``."""
    from transformer_jax.data import builders

    ds = _settings(cfg, ParallelData)
    assert ds.dir is not None  # DataConfig requires it for dataset="parallel"
    require_local(ds.dir, "data.dataset.dir", "a parallel corpus is read from a local folder (data/builders.py)")
    builder = builders.build_parallel_corpus(
        ds.dir,
        src_lang=ds.src_lang,
        tgt_lang=ds.tgt_lang,
        val_fraction=ds.val_fraction,
        decode_errors=ds.decode_errors,
        cache_dir=ds.cache_dir,
    )

    def pair(r: dict) -> tuple[str, str]:
        return r["src"].decode("utf-8"), r["tgt"].decode("utf-8")

    return Corpus("parallel", "seq2seq", _builder_splits(builder, pair, ds), info={"data_dir": str(builder.data_dir)})


@DATASETS.register("tfds")
def tfds_dataset(cfg: DataConfig) -> Corpus:
    """A prepared TFDS catalog dataset (``data.dataset.name``), read without TensorFlow."""
    from transformer_jax.data import builders

    ds = _settings(cfg, TfdsData)
    assert ds.name is not None  # DataConfig requires it for dataset="tfds"
    builder = builders.catalog_builder(ds.name, cache_dir=ds.cache_dir, download=ds.download)
    features = builder.info.features
    keys = list(features.keys()) if hasattr(features, "keys") else []  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]  # tfds types info.features as the base FeatureConnector; hasattr guards it
    info = {"data_dir": str(builder.data_dir)}
    src, tgt = ds.src_lang, ds.tgt_lang
    if {src, tgt} <= set(keys):

        def pair(r: dict) -> tuple[str, str]:
            return r[src].decode("utf-8"), r[tgt].decode("utf-8")

        splits = _builder_splits(builder, pair, ds)
        kind = "seq2seq"
    elif "text" in keys:
        splits, kind = _builder_splits(builder, _text_record, ds), "lm"
    else:
        raise ValueError(
            f"TFDS dataset {ds.name!r} has features {keys}; expected 'text' (LM) or "
            f"data.dataset.src_lang={src!r} and data.dataset.tgt_lang={tgt!r} (translation)"
        )
    if "val" not in splits and "test" in splits:
        splits["val"] = splits["test"]
    many = "train" in splits and len(splits["train"]) > 1
    return Corpus(f"tfds:{ds.name}", kind, splits, records_are_documents=many, joiner="\n" if many else "", info=info)


@DATASETS.register("prepared")
def prepared_dataset(cfg: DataConfig) -> Corpus:
    """Token shards written by ``transformer-jax prepare`` in ``data.dataset.path`` (read lazily)."""
    return prepared_corpus(_settings(cfg, PreparedData))


def prepared_corpus(ds: PreparedData) -> Corpus:
    from transformer_jax.data.shards import TokenShards

    assert ds.path is not None  # DataConfig requires it for dataset="prepared"
    require_local(ds.path, "data.dataset.path", "prepared shards are read as local ArrayRecord files (data/shards.py)")
    path = Path(ds.path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"data.dataset.path: {ds.path} is not a directory; give the --out directory of `transformer-jax prepare`"
        )
    shards = TokenShards(path)
    splits = {split: shards.documents(split) for split in shards.splits}
    return Corpus(f"prepared:{path}", "tokens", splits, records_are_documents=True, info={"shards": shards})


def synthetic_dataset(cfg: DataConfig) -> Corpus:
    ds = _settings(cfg, SyntheticData)
    sizes = {"train": ds.train_size, "val": ds.val_size}
    splits = {
        split: synthetic.SyntheticSource(
            ds.kind, size, seed=cfg.seed, split=split, min_len=ds.min_len, max_len=ds.max_len, vocab=ds.vocab
        )
        for split, size in sizes.items()
    }
    # SyntheticSource is random access (len + getitem) without subclassing Sequence
    return Corpus(ds.kind, "synthetic", cast("dict[str, Sequence]", splits), records_are_documents=True)


for _task in synthetic.TASKS:
    DATASETS.register(_task, synthetic_dataset)


def load_corpus(cfg: DataConfig) -> Corpus:
    """The corpus ``cfg`` names. Text files (``data.dataset.path``, ``val_path``) may be ``gs://`` URLs
    where the environment provides the scheme (`textio`); the TFDS cache is local."""
    if isinstance(cfg.dataset, CorpusData) and cfg.dataset.cache_dir:
        why = "the TFDS cache is built with local file operations"
        require_local(cfg.dataset.cache_dir, "data.dataset.cache_dir", why)
    return DATASETS.get(cfg.dataset.kind)(cfg)
