"""Every dataset and tokenizer settings class has no field its pipeline does not read (issue 43): for
each variant of ``DatasetConfig.VARIANTS`` and ``TokenizerConfig.VARIANTS`` (a new one is covered, or
this test fails asking for its tiny data), the real pipeline is built on tiny files and gives a
training batch and an evaluation batch, and `tests.variant_reads` records which fields were read.

A class whose closed choices read different fields (``packing="documents"`` reads ``document_split``,
a seq2seq format reads ``max_src_len``) is built once per choice; a field is read when some build
reads it. ``DataConfig``'s own fields are read by every dataset."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.data.conftest import caption_pairs, make_documents, write_parallel
from tests.variant_reads import recorded_reads
from transformer_jax.data import DataConfig, DatasetConfig, TokenizerConfig, build_data
from transformer_jax.data.prepare import PrepareConfig, prepare

pytestmark = pytest.mark.filterwarnings("ignore:CharTokenizer", "ignore:some documents", "ignore:some pairs")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Any]:
    """Tiny inputs of every dataset: text, a parallel corpus, prepared shards, TFDS catalogs."""
    root = tmp_path_factory.mktemp("reads")
    (root / "docs.txt").write_text("\n\n".join(make_documents(60)) + "\n")
    (root / "val.txt").write_text("\n\n".join(make_documents(10, seed=5)) + "\n")
    (root / "parallel").mkdir()
    write_parallel(root / "parallel", "train", caption_pairs(60, seed=0))
    write_parallel(root / "parallel", "val", caption_pairs(10, seed=1))
    prepared = {}
    for seed, name in enumerate(("web", "code")):
        (root / f"{name}.txt").write_text("\n\n".join(make_documents(80, seed=seed)) + "\n")
        prepared[name] = root / name
        prepare(PrepareConfig(inputs=(str(root / f"{name}.txt"),), out=str(prepared[name]), tokenizer="byte",
                              val_fraction=0.2), progress=False)  # fmt: skip
    return {"root": root, "prepared": prepared, "tfds": _fake_catalogs(root / "tfds")}


def _fake_catalogs(cache: Path) -> Path:
    """A TFDS LM catalog (``tiny_shakespeare``) and a translation one (``fake_translate``), prepared
    as array_record in ``cache`` from local text, read as `TfdsData` reads any catalog."""
    import tensorflow_datasets as tfds

    from transformer_jax.data import builders

    class FakeTiny(type(tfds.builder("tiny_shakespeare", data_dir=str(cache))), skip_registration=True):
        name = "tiny_shakespeare"

        def _split_generators(self, dl_manager):
            texts = {"train": "\n\n".join(make_documents(30)), "validation": "JULIET:\nbye\n"}
            return {split: self._generate_examples(text) for split, text in texts.items()}

        def _generate_examples(self, text):
            yield 0, {"text": text}

    class FakeTranslate(builders._LocalBuilder):  # registered: `tfds.builder("fake_translate")` finds it
        def _info(self):
            text = tfds.features.Text()
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"de": text, "en": text}))

        def _split_generators(self, dl_manager):
            splits = {"train": caption_pairs(40, seed=2), "validation": caption_pairs(8, seed=3)}
            return {split: self._generate_examples(pairs) for split, pairs in splits.items()}

        def _generate_examples(self, pairs):
            for i, (de, en) in enumerate(pairs):
                yield i, {"de": de, "en": en}

    for cls in (FakeTiny, FakeTranslate):
        cls(data_dir=str(cache), file_format="array_record").download_and_prepare()
    return cache


def _datasets(kind: str, files: dict[str, Any]) -> list[DataConfig]:
    """The configs that exercise the dataset ``kind`` (one per choice that reads other fields)."""
    root, prepared, cache = files["root"], files["prepared"], str(files["root"] / "cache")
    mixture = ",".join(f"{name}={path}:1" for name, path in prepared.items())
    text = {"cache_dir": cache, "max_records_in_memory": 2, "val_fraction": 0.2, "chunk_chars": 256}
    made: dict[str, list[dict[str, Any]]] = {
        "shakespeare": [text, {**text, "packing": "documents", "document_split": "line"}],
        "text": [{**text, "path": str(root / "docs.txt"), "val_path": str(root / "val.txt"),
                  "decode_errors": "replace"},
                 {**text, "path": str(root / "docs.txt"), "packing": "documents", "document_split": "line"}],
        "parallel": [{"dir": str(root / "parallel"), "cache_dir": cache, "max_records_in_memory": 2,
                      "val_fraction": 0.2, "decode_errors": "replace", "max_src_len": 16}],
        "tfds": [{"name": "tiny_shakespeare", "cache_dir": str(files["tfds"]), "packing": "documents",
                  "document_split": "line", "max_records_in_memory": 2, "download": False},
                 {"name": "fake_translate", "cache_dir": str(files["tfds"]), "max_src_len": 16}],
        "prepared": [{"path": str(prepared["web"])}, {"path": str(prepared["web"]), "packing": "documents"}],
        "mixture": [{"mixture": mixture, "schedule": "2:web=1,code=3", "packing": "documents"}],
    }  # fmt: skip
    synthetic = {"train_size": 32, "val_size": 8, "min_len": 2, "max_len": 6, "vocab": 8}
    for task in ("copy", "reverse", "sort", "associative_recall"):
        made[task] = [synthetic, {**synthetic, "format": "seq2seq", "max_src_len": 16}]
    if kind not in made:
        pytest.fail(f"the dataset {kind!r} is new: give it tiny data in _datasets")
    cls = DatasetConfig.VARIANTS.get(kind)
    return [DataConfig(dataset=cls(**fields), seq_len=16, shuffle=True, seed=1, prefetch=1, read_threads=1)
            for fields in made[kind]]  # fmt: skip


def _batches(configs: list[DataConfig]) -> Callable[[], None]:
    def consume() -> None:
        for cfg in configs:
            data = build_data(cfg, batch_size=2)
            with data.train_iterator() as it:
                next(it)
            next(iter(data.eval_batches("val", max_batches=1)))

    return consume


def _unread(consume: Callable[[], None], classes: list[type]) -> dict[str, list[str]]:
    """``{class name: fields never read}`` of the classes while ``consume()`` runs (`recorded_reads`)."""
    with recorded_reads(classes) as reads:
        consume()
    out = {}
    for cls in classes:
        missing = [f.name for f in dataclasses.fields(cls) if (cls, f.name) not in reads]
        if missing:
            out[cls.__name__] = missing
    return out


@pytest.mark.parametrize("kind", DatasetConfig.VARIANTS.names())
def test_every_dataset_reads_all_its_settings(kind, files):
    configs = _datasets(kind, files)
    assert _unread(_batches(configs), [DataConfig, DatasetConfig.VARIANTS.get(kind)]) == {}


@pytest.mark.parametrize("kind", TokenizerConfig.VARIANTS.names())
def test_every_tokenizer_reads_all_its_settings(kind, files):
    cls = TokenizerConfig.VARIANTS.get(kind)
    fields = {"vocab_size": 300, "max_sentences": 1000, "max_records": 50} if kind == "sentencepiece" else {}
    text = DatasetConfig.VARIANTS.get("text")
    dataset = text(
        path=str(files["root"] / "docs.txt"), cache_dir=str(files["root"] / "cache"), tokenizer=cls(**fields)
    )
    assert _unread(_batches([DataConfig(dataset=dataset, seq_len=16)]), [cls]) == {}
