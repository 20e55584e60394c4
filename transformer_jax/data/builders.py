"""TFDS builders of our own (text corpus, parallel corpus) and the TFDS catalog pass-through.

All are prepared with ``file_format='array_record'`` and read with ``builder.as_data_source``;
``tfds.load``/``as_dataset`` would need TensorFlow. Our builders live in a data dir keyed by a
hash of their inputs (resolved paths, sizes, mtimes, options), so an edited file rebuilds:
``{cache_dir}/{builder_name}/{hash}/{builder_name}/1.0.0/*.array_record-*``.

Records (``Text`` features come back as ``bytes``; decode them):
  - ``text_corpus``: ``{"text": bytes}``, ordered chunks of about ``chunk_chars`` characters cut at
    line ends (``disable_shuffling`` keeps file order); splits ``train``, ``validation``.
  - ``parallel_corpus``: ``{"src": bytes, "tgt": bytes}``, line i of ``{split}.{src_lang}[.gz]``
    with line i of ``{split}.{tgt_lang}[.gz]``; splits ``train``, ``validation``, ``test``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import tensorflow_datasets as tfds
from tensorflow_datasets.core import utils as tfds_utils

from transformer_jax.data import textio

TFDS_SPLITS = {"train": "train", "val": "validation", "validation": "validation", "test": "test"}
PARALLEL_SPLIT_NAMES = {
    "train": ("train",),
    "validation": ("val", "valid", "dev", "validation"),
    "test": ("test",),
}
_LEGACY_CATALOG_MODULES = ("tensorflow_datasets.translate", "tensorflow_datasets.text")
_Builder = TypeVar("_Builder", bound=tfds.core.DatasetBuilder)
log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    return Path("~/.cache/transformer_jax/tfds").expanduser()


@contextlib.contextmanager
def _quiet_and_locked(data_dir: Path) -> Iterator[None]:
    """Hold a file lock on ``data_dir`` (concurrent processes build once) with no progress bars."""
    from tensorflow_datasets.core.utils import tqdm_utils

    data_dir.mkdir(parents=True, exist_ok=True)
    was_active = getattr(tqdm_utils, "_active", True)
    with open(data_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tfds.display_progress_bar(False)
        try:
            yield
        finally:
            tfds.display_progress_bar(was_active)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _prepare(builder: _Builder, data_dir: Path) -> _Builder:
    with _quiet_and_locked(data_dir):
        # A fresh data dir is simply not prepared: `is_prepared` would warn that it has no dataset_info.json.
        if not (Path(builder.data_dir) / "dataset_info.json").exists() or not builder.is_prepared():
            builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return builder


class _LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Base of our builders: no code path, so no checksum/metadata files are looked up."""

    VERSION = tfds.core.Version("1.0.0")

    # tfds 4.9.10 computes `code_path` of a builder defined inside a package with
    # `importlib_resources`, which it does not install on Python >= 3.9.
    @tfds_utils.classproperty
    @classmethod
    def code_path(cls) -> None:
        return None

    # TFDS prints "Downloading and preparing dataset Unknown size ..." and "... downloaded and
    # prepared" to stdout; our builders download nothing, so those lines go to the debug log.
    def _log_download_bytes(self) -> None:
        log.debug("preparing %s in %s", self.name, self.data_dir)

    def _log_download_done(self) -> None:
        log.debug("prepared %s in %s", self.name, self.data_dir)


class TextCorpus(_LocalBuilder, skip_registration=True):
    """Local UTF-8 text as ordered chunks; ``split_texts()`` gives {tfds split: text}."""

    def __init__(self, *, split_texts: Callable[[], dict[str, str]] | None = None, chunk_chars: int = 4096, **kwargs):
        self._split_texts = split_texts
        self._chunk_chars = chunk_chars
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Local text files as ordered chunks cut at line ends.",
            features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        assert self._split_texts is not None, "TextCorpus needs split_texts to be prepared"
        return {name: self._generate_examples(text) for name, text in self._split_texts().items()}

    def _generate_examples(self, text: str):
        for i, chunk in enumerate(textio.chunk_at_lines(text, self._chunk_chars)):
            yield i, {"text": chunk}


class ParallelCorpus(_LocalBuilder, skip_registration=True):
    """Aligned sentence pairs; ``split_pairs()`` gives {tfds split: [(src, tgt), ...]}."""

    def __init__(self, *, split_pairs: Callable[[], dict[str, list[tuple[str, str]]]] | None = None, **kwargs):
        self._split_pairs = split_pairs
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        text = tfds.features.Text()
        return tfds.core.DatasetInfo(
            builder=self,
            description="Aligned parallel corpus, line i of source with line i of target.",
            features=tfds.features.FeaturesDict({"src": text, "tgt": tfds.features.Text()}),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        assert self._split_pairs is not None, "ParallelCorpus needs split_pairs to be prepared"
        return {name: self._generate_examples(p) for name, p in self._split_pairs().items()}

    def _generate_examples(self, pairs):
        for i, (src, tgt) in enumerate(pairs):
            yield i, {"src": src, "tgt": tgt}


def _keyed_dir(cache_dir: str | None, name: str, key: str, inputs: dict) -> Path:
    data_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    data_dir = data_dir / name / key
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "inputs.json").write_text(json.dumps(inputs, indent=1, default=str))
    return data_dir


def split_by_characters(text: str, val_fraction: float) -> dict[str, str]:
    """nanoGPT's split: the first ``1 - val_fraction`` of the characters train, the rest val."""
    cut = int(len(text) * (1.0 - val_fraction))
    return {"train": text[:cut], "validation": text[cut:]}


def build_text_corpus(
    path: str,
    *,
    val_path: str | None = None,
    val_fraction: float = 0.1,
    decode_errors: str = "strict",
    chunk_chars: int = 4096,
    cache_dir: str | None = None,
) -> TextCorpus:
    """Prepare (or reuse) the text-corpus builder for ``path`` (files, comma list or directory)."""
    files = textio.expand_paths(path, field="data.dataset.path")
    val_files = textio.expand_paths(val_path, field="data.dataset.val_path") if val_path else []
    options = dict(
        val=[str(f) for f in val_files],
        val_fraction=None if val_files else val_fraction,
        decode_errors=decode_errors,
        chunk_chars=chunk_chars,
        version=1,
    )
    key = textio.fingerprint(files + val_files, **options)
    data_dir = _keyed_dir(cache_dir, "text_corpus", key, {"files": files, **options})

    def split_texts() -> dict[str, str]:
        text = textio.read_texts(files, decode_errors, field="data.dataset.path")
        if not val_files:
            return split_by_characters(text, val_fraction)
        return {"train": text, "validation": textio.read_texts(val_files, decode_errors, field="data.dataset.val_path")}

    builder = TextCorpus(
        split_texts=split_texts, chunk_chars=chunk_chars, data_dir=str(data_dir), file_format="array_record"
    )
    return _prepare(builder, data_dir)


def find_parallel_files(directory: str, src_lang: str, tgt_lang: str) -> dict[str, tuple[Path, Path]]:
    """{tfds split: (src file, tgt file)} for ``{split}.{lang}`` or ``{split}.{lang}.gz``."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"data.dataset.dir={directory!r} is not a directory of parallel text files")
    present = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))

    def find(names: tuple[str, ...], lang: str) -> Path | None:
        for name in names:
            for candidate in (f"{name}.{lang}", f"{name}.{lang}.gz"):
                if candidate in present:
                    return root / candidate
        return None

    found: dict[str, tuple[Path, Path]] = {}
    for split, names in PARALLEL_SPLIT_NAMES.items():
        src, tgt = find(names, src_lang), find(names, tgt_lang)
        if src is None and tgt is None and split != "train":
            continue
        if src is None or tgt is None:
            lang = src_lang if src is None else tgt_lang
            raise FileNotFoundError(
                f"parallel corpus {root}: no {names[0]}.{lang} or {names[0]}.{lang}.gz for split "
                f"{split!r} (data.dataset.src_lang={src_lang!r}, data.dataset.tgt_lang={tgt_lang!r}); the directory "
                f"contains: {', '.join(present) or '(nothing)'}"
            )
        found[split] = (src, tgt)
    return found


def read_parallel(src: Path, tgt: Path, decode_errors: str = "strict") -> list[tuple[str, str]]:
    """Aligned (src, tgt) line pairs; pairs with an empty side are dropped."""
    src_text, bad_s = textio.read_text(src, decode_errors)
    tgt_text, bad_t = textio.read_text(tgt, decode_errors)
    if bad_s or bad_t:
        warnings.warn(f"replaced non-UTF-8 bytes with U+FFFD in {src} ({bad_s}) / {tgt} ({bad_t})", stacklevel=2)
    src_lines, tgt_lines = (t.split("\n") for t in (src_text, tgt_text))
    for lines in (src_lines, tgt_lines):
        if lines and lines[-1] == "":
            lines.pop()
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"parallel files are not aligned: {src} has {len(src_lines)} lines but {tgt} has "
            f"{len(tgt_lines)}; line i of one must translate line i of the other"
        )
    pairs = [(s.strip(), t.strip()) for s, t in zip(src_lines, tgt_lines)]
    pairs = [(s, t) for s, t in pairs if s and t]
    if not pairs:
        raise ValueError(f"parallel files {src} and {tgt} are empty (after stripping whitespace)")
    return pairs


def build_parallel_corpus(
    directory: str,
    *,
    src_lang: str = "de",
    tgt_lang: str = "en",
    val_fraction: float = 0.1,
    decode_errors: str = "strict",
    cache_dir: str | None = None,
) -> ParallelCorpus:
    """Prepare (or reuse) the parallel-corpus builder for ``directory``."""
    files = find_parallel_files(directory, src_lang, tgt_lang)
    options = dict(
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        decode_errors=decode_errors,
        val_fraction=val_fraction,
        splits=sorted(files),
        version=1,
    )
    key = textio.fingerprint([p for pair in files.values() for p in pair], **options)
    data_dir = _keyed_dir(cache_dir, "parallel_corpus", key, {"files": files, **options})

    def split_pairs() -> dict[str, list[tuple[str, str]]]:
        pairs = {split: read_parallel(s, t, decode_errors) for split, (s, t) in files.items()}
        if "validation" not in pairs:
            warnings.warn(
                f"{directory}: no val.{src_lang}/val.{tgt_lang}; using the last "
                f"{val_fraction:.0%} of train as validation",
                stacklevel=2,
            )
            train = pairs["train"]
            cut = max(1, int(len(train) * (1 - val_fraction)))
            pairs["train"], pairs["validation"] = train[:cut], train[cut:]
        return pairs

    builder = ParallelCorpus(split_pairs=split_pairs, data_dir=str(data_dir), file_format="array_record")
    return _prepare(builder, data_dir)


def catalog_builder(name: str, *, cache_dir: str | None = None, download: bool = False) -> tfds.core.DatasetBuilder:
    """A TFDS catalog dataset (``tiny_shakespeare``, ``lm1b``, ``wmt14_translate/de-en``).

    Reads an array_record preparation in ``cache_dir``. With ``download=False`` (the default)
    nothing touches the network: an unprepared dataset raises ``FileNotFoundError`` at once.
    """
    import importlib

    data_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    try:
        builder = tfds.builder(name, data_dir=str(data_dir), file_format="array_record")
    except tfds.core.DatasetNotFoundError:
        for module in _LEGACY_CATALOG_MODULES:  # not auto-registered when TensorFlow is absent
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        try:
            builder = tfds.builder(name, data_dir=str(data_dir), file_format="array_record")
        except tfds.core.DatasetNotFoundError:
            raise ValueError(
                f"data.dataset.name={name!r} is not in the TFDS catalog (see tfds.list_builders())"
            ) from None
    if not builder.is_prepared():
        if not download:
            raise FileNotFoundError(
                f"TFDS dataset {name!r} is not prepared in {builder.data_dir} and no network: "
                "downloading is off (data.dataset.download=false); prepare it on a machine with "
                f"network (tfds.builder({name!r}, data_dir=DIR, file_format='array_record')"
                ".download_and_prepare()) and copy DIR to data.dataset.cache_dir, or use data.dataset=text"
            )
        _prepare(builder, data_dir)
    fmt = builder.info.file_format
    if fmt is not None and fmt != tfds.core.FileFormat.ARRAY_RECORD:
        raise FileNotFoundError(
            f"TFDS dataset {name!r} in {builder.data_dir} was prepared as {fmt.value}, not "
            "array_record; prepare it again with file_format='array_record' (reading without "
            "TensorFlow needs random access)"
        )
    return builder


def data_source(builder: tfds.core.DatasetBuilder, split: str):
    """Random-access records of ``split`` (``train``, ``val``/``validation``, ``test``)."""
    tfds_split = TFDS_SPLITS.get(split, split)
    splits = list(builder.info.splits)
    if tfds_split not in splits:
        raise KeyError(f"split {split!r} is not in {builder.name} ({builder.data_dir}); it has: {', '.join(splits)}")
    return builder.as_data_source(tfds_split)  # pyright: ignore[reportCallIssue]  # tfds's wrapt logging decorator hides the signature
