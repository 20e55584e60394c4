"""TFDS builders (array_record, no TensorFlow): splits, rebuilds, parallel alignment, errors."""

import gzip
import os
import socket
import time
import warnings

import pytest

from transformer_jax.data import DataConfig, TfdsData, build_data, builders


def _records(builder, split):
    return [r["text"].decode("utf-8") for r in builders.data_source(builder, split)]


def test_text_builder_splits_90_10_by_characters(tmp_path, cache_dir):
    text = "".join(f"line {i}: {'é' * (i % 7)} some words\n" for i in range(500))
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    b = builders.build_text_corpus(str(tmp_path / "a.txt"), chunk_chars=256, cache_dir=cache_dir)
    train, val = _records(b, "train"), _records(b, "val")
    assert len(train) > 10  # several chunks, read back in order
    cut = int(len(text) * 0.9)
    assert "".join(train) == text[:cut] and "".join(val) == text[cut:]
    assert all(c.endswith("\n") for c in train[:-1])  # chunks end at line ends


def test_text_builder_val_path_dirs_commas_and_rebuild(tmp_path, cache_dir):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "1.txt").write_text("first file\n")
    (d / "2.txt").write_text("second file")  # no trailing newline: one is added
    (d / ".hidden").write_text("ignored\n")
    (tmp_path / "v.txt").write_text("validation\n")
    b = builders.build_text_corpus(str(d), val_path=str(tmp_path / "v.txt"), cache_dir=cache_dir)
    assert "".join(_records(b, "train")) == "first file\nsecond file\n"
    assert _records(b, "validation") == ["validation\n"]
    b2 = builders.build_text_corpus(
        f"{d / '1.txt'}, {d / '2.txt'}", val_path=str(tmp_path / "v.txt"), cache_dir=cache_dir
    )
    assert "".join(_records(b2, "train")) == "first file\nsecond file\n"
    # an edited file gets a new data dir (hash of path, size, mtime) and is rebuilt
    time.sleep(0.01)
    (d / "1.txt").write_text("edited!!!!\n")
    b3 = builders.build_text_corpus(str(d), val_path=str(tmp_path / "v.txt"), cache_dir=cache_dir)
    assert b3.data_dir != b.data_dir
    assert "".join(_records(b3, "train")) == "edited!!!!\nsecond file\n"


def test_parallel_builder_reads_gz_and_plain(parallel_dir, cache_dir):
    b = builders.build_parallel_corpus(str(parallel_dir), src_lang="de", tgt_lang="en", cache_dir=cache_dir)
    assert {s: b.info.splits[s].num_examples for s in ("train", "validation", "test")} == {
        "train": 48,
        "validation": 10,
        "test": 6,
    }
    recs = list(builders.data_source(b, "train"))
    assert recs[7]["src"].decode() == "satz 7 x x" and recs[7]["tgt"].decode() == "sentence 7 x x"


def test_parallel_mismatch_names_both_files_and_counts(tmp_path, cache_dir):
    (tmp_path / "train.de").write_text("a\nb\nc\n")
    with gzip.open(tmp_path / "train.en.gz", "wt") as f:
        f.write("a\nb\n")
    with pytest.raises(ValueError) as e:
        builders.build_parallel_corpus(str(tmp_path), cache_dir=cache_dir)
    msg = str(e.value)
    assert "train.de has 3 lines" in msg and "train.en.gz has 2" in msg


def test_parallel_missing_language_lists_directory(tmp_path, cache_dir):
    (tmp_path / "train.de").write_text("a\n")
    (tmp_path / "train.fr").write_text("a\n")
    with pytest.raises(FileNotFoundError) as e:
        builders.build_parallel_corpus(str(tmp_path), src_lang="de", tgt_lang="en", cache_dir=cache_dir)
    assert "train.en" in str(e.value) and "train.de, train.fr" in str(e.value)


def test_missing_and_empty_files_are_named(tmp_path, cache_dir):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match="nope.txt does not exist"):
        builders.build_text_corpus(str(missing), cache_dir=cache_dir)
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n\t\n")
    with pytest.raises(ValueError, match=r"empty\.txt is empty \(after stripping"):
        builders.build_text_corpus(str(empty), cache_dir=cache_dir)


def test_non_utf8_strict_names_file_line_and_offset(tmp_path, cache_dir):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("line one\nline two\nK\xf6nig here\n".encode("latin-1"))
    with pytest.raises(ValueError) as e:
        builders.build_text_corpus(str(bad), cache_dir=cache_dir)
    msg = str(e.value)
    assert "latin1.txt" in msg and "line 3" in msg and "byte offset 19" in msg and "0xf6" in msg
    assert "decode_errors=replace" in msg


def test_non_utf8_replace_policy_warns_once(tmp_path, cache_dir):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(("K\xf6nig\n" * 50).encode("latin-1"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = builders.build_text_corpus(str(bad), decode_errors="replace", cache_dir=cache_dir)
    assert len([w for w in caught if "U+FFFD" in str(w.message)]) == 1
    text = "".join(_records(b, "train") + _records(b, "val"))
    assert text == "K\ufffdnig\n" * 50


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("name", ["tiny_shakespeare", "lm1b", "wmt14_translate/de-en"])
def test_tfds_catalog_not_prepared_fails_fast_offline(name, tmp_path, no_network):
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as e:
        builders.catalog_builder(name, cache_dir=str(tmp_path))
    msg = str(e.value)
    assert f"{name!r} is not prepared in {tmp_path}" in msg and "no network" in msg
    assert "data.dataset=text" in msg
    assert time.perf_counter() - start < 10


def test_tfds_catalog_unknown_name(tmp_path, no_network):
    with pytest.raises(ValueError, match="not in the TFDS catalog"):
        builders.catalog_builder("no_such_dataset_xyz", cache_dir=str(tmp_path))


@pytest.mark.filterwarnings("ignore:CharTokenizer")
def test_tfds_catalog_prepared_array_record_is_read(tmp_path, no_network):
    """A catalog dataset prepared elsewhere (faked here from local text) reads without TF."""
    import tensorflow_datasets as tfds

    base = type(tfds.builder("tiny_shakespeare", data_dir=str(tmp_path)))

    class FakeTiny(base, skip_registration=True):
        name = "tiny_shakespeare"

        def _split_generators(self, dl_manager):
            return {
                s: self._generate_examples(t)
                for s, t in (("train", "ROMEO:\nhello\n"), ("validation", "JULIET:\nbye\n"), ("test", "x\n"))
            }

        def _generate_examples(self, text):
            yield 0, {"text": text}

    FakeTiny(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
    b = builders.catalog_builder("tiny_shakespeare", cache_dir=str(tmp_path))
    assert _records(b, "train") == ["ROMEO:\nhello\n"] and _records(b, "val") == ["JULIET:\nbye\n"]
    assert os.path.isdir(b.data_dir)
    data = build_data(
        DataConfig(dataset=TfdsData(name="tiny_shakespeare", cache_dir=str(tmp_path)), seq_len=4), batch_size=2
    )
    assert data.task == "lm" and data.tokenizer.chars == "\n:EMORehlo"
    with data.train_iterator() as it:
        assert data.tokenizer.decode(next(it)["inputs"][0]) in "ROMEO:\nhello\n"
    assert data.split_sizes["val"]["tokens"] == len("JULIET:\nbye\n")
