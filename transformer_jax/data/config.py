"""``DataConfig``: which dataset (``data.dataset``, one settings class per dataset), sequence shapes
and loading options.

Each dataset's class has only the fields its loader reads: ``--set data.dataset=text`` chooses
`TextData`, ``--set data.dataset.path=FILE`` sets its file, and a field of another dataset does not
exist there. The corpora that train a tokenizer hold its settings (``data.dataset.tokenizer``,
`tokenizer_config`). The pipeline registers its loaders under the same names (``sources.DATASETS``);
this module does not import it. Closed choices are ``Literal`` types; the rules across fields are
the small named checks beside the class that owns them. Every error names the field and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

from transformer_jax.core.configlib import Config, Variant, fail, setting, variant
from transformer_jax.core.registry import Registry
from transformer_jax.data.documents import DocumentSplit
from transformer_jax.data.mixspec import parse_mixture, parse_schedule
from transformer_jax.data.synthetic import TASKS
from transformer_jax.data.textio import DecodeErrors
from transformer_jax.data.tokenizer_config import CharSettings, TokenizerConfig

Packing = Literal["stream", "documents"]


class DatasetConfig(Variant):
    """A dataset's settings (``sources.DATASETS`` has its loader by the same name)."""

    PATH = "data.dataset"
    VARIANTS: ClassVar[Registry[type[DatasetConfig]]] = Registry("dataset")

    @property
    def task(self) -> str:
        """ "lm" or "seq2seq": what the batches will hold, known before any data is read."""
        return "lm"

    def src_len(self) -> int | None:
        """The seq2seq source length (None: the dataset has no sources)."""
        return None

    def required(self) -> tuple[str, str] | None:
        """(field, what to give) of a setting that must be given but is not."""
        return None


@dataclass(frozen=True)
class PackedText:
    """How LM text becomes rows: ``stream`` (concatenate, cut windows; random offset per epoch) or
    ``documents`` (first-fit packing of whole documents with segment ids; ``document_split``: what a
    document of a plain text is, a blank-line ``paragraph`` or a ``line``)."""

    packing: Packing = "stream"
    document_split: DocumentSplit = "paragraph"

    def check(self) -> None:
        _split_needs_documents(self)


@dataclass(frozen=True)
class SourceLength:
    """``max_src_len``: the seq2seq source length (EOS included)."""

    max_src_len: int = setting(64, ge=2)

    def src_len(self) -> int | None:
        return self.max_src_len


@dataclass(frozen=True)
class CorpusData(DatasetConfig):
    """A corpus read into a TFDS cache (``cache_dir``; splits of at most ``max_records_in_memory``
    records are decoded into memory once, larger ones read lazily), with a tokenizer trained on its
    training split."""

    tokenizer: TokenizerConfig = setting(factory=CharSettings)
    cache_dir: str | None = None
    max_records_in_memory: int = setting(1_000_000, ge=1)


@variant("shakespeare")
@dataclass(frozen=True)
class ShakespeareData(PackedText, CorpusData):
    """The offline quickstart corpus, the last ``val_fraction`` of its characters for validation,
    cached in chunks of about ``chunk_chars`` characters."""

    val_fraction: float = setting(0.1, gt=0.0, lt=1.0)
    chunk_chars: int = setting(4096, ge=1)


@variant("text")
@dataclass(frozen=True)
class TextData(PackedText, CorpusData):
    """Local text files: ``path`` (one, comma-separated, or a directory); ``val_path`` replaces the
    split of the last ``val_fraction`` of the characters; non-UTF-8 bytes are an error or replaced
    (``decode_errors``)."""

    path: str | None = None
    val_path: str | None = None
    val_fraction: float = setting(0.1, gt=0.0, lt=1.0)
    chunk_chars: int = setting(4096, ge=1)
    decode_errors: DecodeErrors = "strict"

    def required(self) -> tuple[str, str] | None:
        return None if self.path else ("path", "a text file, comma-separated files or a directory")


@variant("parallel")
@dataclass(frozen=True)
class ParallelData(SourceLength, CorpusData):
    """A parallel corpus ``{split}.{lang}[.gz]`` in ``dir`` (no val split: the last ``val_fraction``
    of train)."""

    dir: str | None = None
    src_lang: str = "de"
    tgt_lang: str = "en"
    val_fraction: float = setting(0.1, gt=0.0, lt=1.0)
    decode_errors: DecodeErrors = "strict"

    @property
    def task(self) -> str:
        return "seq2seq"

    def required(self) -> tuple[str, str] | None:
        return None if self.dir else ("dir", "a directory with train.SRC/train.TGT (optionally .gz) and val.*")

    def check(self) -> None:
        _two_languages(self)


@variant("tfds")
@dataclass(frozen=True)
class TfdsData(SourceLength, PackedText, CorpusData):
    """A TFDS catalog dataset ``name`` (``tiny_shakespeare``, ``lm1b``, ``wmt14_translate/de-en``)
    read from ``cache_dir``; ``download`` allows preparing it (needs network). Translation catalogs
    (``src_lang``/``tgt_lang`` features) are seq2seq, the others LM text."""

    name: str | None = None
    download: bool = False
    src_lang: str = "de"
    tgt_lang: str = "en"

    @property
    def task(self) -> str:
        return "seq2seq" if self.name and "translate" in self.name else "lm"

    def required(self) -> tuple[str, str] | None:
        return None if self.name else ("name", "a TFDS catalog name such as tiny_shakespeare")

    def check(self) -> None:
        _two_languages(self)
        _split_needs_documents(self)
        _read_by_task(self, seq2seq=("max_src_len", "src_lang", "tgt_lang"), lm=("packing", "document_split"))


@variant("prepared")
@dataclass(frozen=True)
class PreparedData(DatasetConfig):
    """A directory ``path`` that ``transformer-jax prepare`` wrote: training streams its shards
    (``streaming.py``), validation reads its ``val`` split, the tokenizer is the one saved there.
    ``stream`` concatenates ``[BOS] doc [EOS]`` in shuffled order and cuts windows; ``documents``
    packs them, cutting a document longer than ``seq_len`` into pieces (nothing dropped)."""

    path: str | None = None
    packing: Packing = "stream"

    def required(self) -> tuple[str, str] | None:
        return None if self.path else ("path", "a directory written by `transformer-jax prepare`")


@variant("mixture")
@dataclass(frozen=True)
class MixtureData(DatasetConfig):
    """Named prepared directories and weights, ``"web=/p/web:0.7,code=/p/code:0.3"`` (``mixture.py``):
    each row of a batch comes from one source, drawn with these weights; ``schedule``: later stages
    of weights, ``"1000:web=0.5,code=0.5;..."`` (from that step on). Packed as `PreparedData`."""

    mixture: str | None = None
    schedule: str | None = None
    packing: Packing = "stream"

    def required(self) -> tuple[str, str] | None:
        what = "NAME=PATH:WEIGHT,... of directories written by `transformer-jax prepare`"
        return None if self.mixture else ("mixture", what)

    def check(self) -> None:
        if self.mixture is not None:  # the schedule's stages name the mixture's sources
            parse_schedule(self.schedule, tuple(s.name for s in parse_mixture(self.mixture)))


@dataclass(frozen=True)
class SyntheticData(SourceLength, DatasetConfig):
    """A synthetic task (``synthetic.py``) of ``train_size``/``val_size`` examples, sequences of
    ``min_len`` to ``max_len`` symbols of ``vocab``; ``format``: ``lm`` (one row ``[BOS] prompt SEP
    answer``) or ``seq2seq`` (prompt to the encoder, answer to the decoder)."""

    format: Literal["lm", "seq2seq"] = "lm"
    train_size: int = setting(10000, ge=1)
    val_size: int = setting(500, ge=1)
    min_len: int = setting(4, ge=1)
    max_len: int = setting(16, ge=1)
    vocab: int = setting(16, ge=1)

    @property
    def task(self) -> str:
        return self.format

    def check(self) -> None:
        _synthetic_lengths(self)
        _read_by_task(self, seq2seq=("max_src_len",), lm=())


@variant("copy")
@dataclass(frozen=True)
class CopyTask(SyntheticData):
    """x -> x."""


@variant("reverse")
@dataclass(frozen=True)
class ReverseTask(SyntheticData):
    """x -> x reversed."""


@variant("sort")
@dataclass(frozen=True)
class SortTask(SyntheticData):
    """x -> x sorted."""


@variant("associative_recall")
@dataclass(frozen=True)
class AssociativeRecallTask(SyntheticData):
    """k1 v1 .. kn vn kq -> vq."""


@dataclass(frozen=True)
class DataConfig(Config):
    """Data options (``--set data.FIELD=VALUE``): ``dataset`` (its settings ``data.dataset.FIELD``);
    ``seq_len``: LM tokens per row / seq2seq max target length (BOS/EOS included); ``shuffle`` and
    ``seed``: the training order; ``prefetch`` batches, ``read_threads`` and ``worker_count`` worker
    processes: how fast batches are read."""

    dataset: DatasetConfig = setting(factory=ShakespeareData)
    seq_len: int = setting(64, ge=2)  # room for BOS/EOS
    shuffle: bool = True
    seed: int = setting(0, ge=0, lt=2**32)
    prefetch: int = setting(2, ge=0)
    read_threads: int = setting(2, ge=1)
    worker_count: int = setting(0, ge=0)

    PATH: ClassVar[str] = "data"

    def check(self) -> None:
        for rule in (_required_source, _synthetic_rows):
            rule(self)

    def replace(self, **changes) -> DataConfig:
        return dataclasses.replace(self, **changes)

    @property
    def task(self) -> str:
        """ "lm" or "seq2seq": what the batches will hold, known before any data is read."""
        return self.dataset.task

    @property
    def max_src_len(self) -> int:
        """The seq2seq source length of the dataset (a seq2seq dataset has one)."""
        length = self.dataset.src_len()
        if length is None:
            raise ValueError(f"data.dataset={self.dataset.kind!r} has no seq2seq sources (no max_src_len)")
        return length


def _required_source(cfg: DataConfig) -> None:
    """A dataset that reads a path, a directory or a catalog name needs it given."""
    missing = cfg.dataset.required()
    if missing is not None:
        field, what = missing
        fail(f"data.dataset.{field}", None, f"is required when data.dataset={cfg.dataset.kind!r}", f"give {what}")


def _split_needs_documents(cfg: PackedText) -> None:
    """``document_split`` is read only by the ``documents`` packing."""
    if cfg.packing == "stream" and cfg.document_split != "paragraph":
        fail("data.dataset.document_split", cfg.document_split, "is read only with data.dataset.packing=documents",
             "remove the setting or set data.dataset.packing=documents")  # fmt: skip


def _two_languages(cfg: ParallelData | TfdsData) -> None:
    if cfg.src_lang == cfg.tgt_lang:
        fail(f"{cfg.PATH}.tgt_lang", cfg.tgt_lang, f"equals {cfg.PATH}.src_lang", "give two different languages")


def _read_by_task(cfg: DatasetConfig, *, seq2seq: tuple[str, ...], lm: tuple[str, ...]) -> None:
    """A field only the other task reads (``seq2seq``'s under an LM task and ``lm``'s under a seq2seq
    one) must keep its default: set, it would be ignored."""
    unread = lm if cfg.task == "seq2seq" else seq2seq
    for name in unread:
        value, default = getattr(cfg, name), getattr(type(cfg), name)
        if value != default:
            why = f"is not read when {cfg.PATH} is a {cfg.task} task (only by {'lm' if name in lm else 'seq2seq'} ones)"
            fail(f"{cfg.PATH}.{name}", value, why, f"remove the setting (default {default!r})")


def _synthetic_lengths(cfg: SyntheticData) -> None:
    """A synthetic task's sequences fit its vocabulary."""
    lo, hi = cfg.min_len, cfg.max_len
    if lo > hi:
        fail(f"{cfg.PATH}.min_len", lo, f"exceeds {cfg.PATH}.max_len={hi}", "make min <= max")
    task = TASKS.get(cfg.kind) if cfg.kind in TASKS else None  # None: the family's base, no task
    if task is not None and cfg.vocab < task.min_vocab(hi):
        why = f"is too small for {cfg.kind} with max_len={hi}"
        fail(f"{cfg.PATH}.vocab", cfg.vocab, why, f"use >= {task.min_vocab(hi)}")


def _synthetic_rows(cfg: DataConfig) -> None:
    """A synthetic task's sequences fit the rows (LM or seq2seq)."""
    ds = cfg.dataset
    if not isinstance(ds, SyntheticData):
        return
    task, hi = TASKS.get(ds.kind), ds.max_len
    at = f"of {ds.kind} at data.dataset.max_len={hi}"
    if ds.format == "lm" and cfg.seq_len < task.lm_len(hi):
        fail(
            "data.seq_len",
            cfg.seq_len,
            f"cannot hold [BOS] prompt SEP answer {at}",
            f"use seq_len >= {task.lm_len(hi)}",
        )
    if ds.format == "seq2seq":
        if ds.max_src_len < task.prompt_len(hi) + 1:
            fail(
                "data.dataset.max_src_len",
                ds.max_src_len,
                f"is shorter than {task.prompt_len(hi) + 1} (prompt + EOS {at})",
            )
        if cfg.seq_len < task.answer_len(hi) + 1:
            fail("data.seq_len", cfg.seq_len, f"is shorter than {task.answer_len(hi) + 1} (answer + EOS {at})")
