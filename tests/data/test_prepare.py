"""``prepare``: inputs (text, directory, JSONL, Parquet) -> ArrayRecord shards of token ids, one record
per document; tokenizers trained or read from a file; same inputs -> same bytes (any worker count);
an interrupted run resumes without rewriting its finished shards."""

import gzip
import json
import os
from pathlib import Path

import grain
import numpy as np
import pytest

from tests.data.conftest import make_documents
from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import prepare as prepare_mod
from transformer_jax.data.lm import split_documents
from transformer_jax.data.prepare import PrepareConfig, prepare
from transformer_jax.data.shards import TokenShards, read_manifest

UNICODE_DOCS = ["Æsop’s fable — ü", "naïve café\nsecond line", "日本語のテキスト", "emoji 🎭 and tabs\tend"]


def run(tmp_path, inputs, tokenizer="char", out="out", **kw) -> tuple[dict, TokenShards]:
    kw.setdefault("shard_mb", 0.001)
    cfg = PrepareConfig(inputs=tuple(map(str, inputs)), out=str(tmp_path / out), tokenizer=tokenizer, **kw)
    summary = prepare(cfg, progress=False)
    return summary, TokenShards(tmp_path / out)


def decoded(shards: TokenShards, split="train") -> list[str]:
    tok = shards.tokenizer()
    return [tok.decode(ids) for ids in shards.documents(split)]


def shard_bytes(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir()) if p.name != "manifest.json"}


def test_text_file_paragraphs_char_round_trip_across_shards(tmp_path, docs_file):
    path, docs = docs_file
    summary, shards = run(tmp_path, [path], "char", record_kb=0.5)
    assert decoded(shards) == docs == split_documents(path.read_text(), "paragraph")
    assert summary["train_documents"] == len(docs) and summary["shards_written"] > 3
    assert summary["train_tokens"] == sum(map(len, docs)) and summary["unk_tokens"] == 0
    # grain reads the shards as they are: records of K documents (n <u4, ends <u4[n], uint16 ids).
    source = grain.sources.ArrayRecordDataSource([str(p) for p in shards.files("train")])
    entries = shards.manifest["shards"]
    assert len(source) == sum(e["records"] for e in entries) and shards.manifest["dtype"] == "<u2"
    assert all(e["records"] == -(-e["documents"] // e["documents_per_record"]) for e in entries)
    assert max(e["records"] for e in entries) > 1 and max(e["documents_per_record"] for e in entries) > 1
    first = entries[0]
    K, record = first["documents_per_record"], source[1]
    n = int.from_bytes(record[:4], "little")
    ends = np.frombuffer(record[4 : 4 * (n + 1)], "<u4")
    ids = np.frombuffer(record[4 * (n + 1) :], "<u2")
    assert n == K and ends[-1] == len(ids)
    tok = shards.tokenizer()
    assert [tok.decode(ids[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)] == docs[K : 2 * K]
    # Random access (as training reads) gives the documents of a pass in order, negative indices too.
    view = shards.documents("train")
    order = np.random.default_rng(0).permutation(len(docs))
    assert [tok.decode(view[int(i)]) for i in order] == [docs[i] for i in order]
    assert tok.decode(view[-1]) == docs[-1] and len(view) == len(docs)


def test_shards_of_format_version_1_are_refused_and_prepare_rewrites_them(tmp_path, docs_file):
    path, docs = docs_file
    run(tmp_path, [path], "char")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (tmp_path / "out" / "manifest.json").write_text(json.dumps({**manifest, "format_version": 1}))
    with pytest.raises(ValueError, match="format_version 1; this version reads only 2 .* run the same `transf"):
        TokenShards(tmp_path / "out")
    summary, shards = run(tmp_path, [path], "char")
    assert summary["shards_kept"] == 0 and decoded(shards) == docs


def test_directory_byte_tokenizer_lines_and_files(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_text("\n".join(UNICODE_DOCS[:2]) + "\n")
    (root / "sub" / "c.txt").write_text(UNICODE_DOCS[2] + "\r\n" + UNICODE_DOCS[3])
    (root / "a.txt").write_text("first file\n\n\n")
    (root / ".hidden").write_text("never read")
    _, shards = run(tmp_path, [root], "byte", documents="line")
    lines = ["first file", "Æsop’s fable — ü", "naïve café", "second line", *UNICODE_DOCS[2:]]
    assert decoded(shards) == lines
    _, shards = run(tmp_path, [root], "byte", out="files", documents="file")
    assert decoded(shards) == ["first file\n\n\n", "\n".join(UNICODE_DOCS[:2]) + "\n", "\n".join(UNICODE_DOCS[2:])]
    assert [s["documents"] for s in shards.manifest["sources"]] == [1, 1, 1]


def test_jsonl_field_skips_blank_documents(tmp_path):
    rows = [{"id": i, "body": d} for i, d in enumerate(UNICODE_DOCS)] + [{"id": 9, "body": " "}, {"body": None}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "\n")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"body": "from the gzip file"}) + "\n")
    _, shards = run(tmp_path, [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"], "byte", field="body")
    assert decoded(shards) == [*UNICODE_DOCS, "from the gzip file"]
    assert [(s["documents"], s["skipped"]) for s in shards.manifest["sources"]] == [(4, 2), (1, 0)]


def test_parquet_column(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="reading Parquet needs pyarrow (the parquet extra)")
    import pyarrow.parquet as pq

    docs = make_documents(40, seed=3)
    pq.write_table(pa.table({"n": list(range(40)), "content": docs}), tmp_path / "docs.parquet", row_group_size=7)
    _, shards = run(tmp_path, [tmp_path / "docs.parquet"], "char", field="content")
    assert decoded(shards) == docs
    with pytest.raises(ValueError, match=r"no column 'text' \(it has: n, content\); name it with --field"):
        run(tmp_path, [tmp_path / "docs.parquet"], "char", out="other")
    with pytest.raises(ValueError, match="column 'n' holds int64, not strings"):
        run(tmp_path, [tmp_path / "docs.parquet"], "char", out="other2", field="n")


def test_sentencepiece_trained_on_the_sample(tmp_path, docs_file):
    path, docs = docs_file
    summary, shards = run(tmp_path, [path], "sentencepiece", vocab_size=400, shard_mb=0.002)
    tok = shards.tokenizer()
    assert tok.kind == "sentencepiece" and summary["vocab_size"] == tok.vocab_size
    assert decoded(shards) == docs  # plain ASCII survives NFKC
    assert summary["train_tokens"] < sum(map(len, docs)) / 2  # pieces, not characters
    assert shards.manifest["options"]["tokenizer"] == {
        "name": "sentencepiece", "sample_mb": 100.0, "vocab_size": 400, "sp_model_type": "bpe"}  # fmt: skip
    _, saved = run(tmp_path, [path], str(shards.directory / "tokenizer.json"), out="saved", shard_mb=0.002)
    assert shard_bytes(saved.directory) == shard_bytes(shards.directory)  # the saved model, not retrained


def test_hugging_face_tokenizer_json(tmp_path, docs_file):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path, docs = docs_file
    hf = Tokenizer(models.BPE(unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<unk>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator(docs, trainer)
    model_dir = tmp_path / "hf"
    model_dir.mkdir()
    hf.save(str(model_dir / "tokenizer.json"))
    with pytest.raises(ValueError, match="needs a tokenizer_config.json beside it"):
        run(tmp_path, [path], str(model_dir / "tokenizer.json"), out="refused")
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    summary, shards = run(tmp_path, [path], str(model_dir / "tokenizer.json"))
    assert [ids.tolist() for ids in shards.documents("train")] == [hf.encode(d).ids for d in docs]
    assert decoded(shards) == docs and shards.tokenizer().kind == "huggingface"
    # The model directory names the same tokenizer; a run's saved tokenizer.json is read too.
    _, again = run(tmp_path, [path], str(model_dir), out="by_dir")
    assert shard_bytes(again.directory) == shard_bytes(shards.directory)
    _, saved = run(tmp_path, [path], str(shards.directory / "tokenizer.json"), out="saved")
    assert shard_bytes(saved.directory) == shard_bytes(shards.directory)


def test_validation_split_by_document_hash(tmp_path, docs_file):
    path, docs = docs_file
    corpus = tmp_path / "dup.txt"
    corpus.write_text("\n\n".join(docs + docs[:20]) + "\n")  # 20 documents twice
    _, shards = run(tmp_path, [corpus], "char", val_fraction=0.25)
    train, val = decoded(shards, "train"), decoded(shards, "val")
    assert sorted(train + val) == sorted(docs + docs[:20]) and 0.1 < len(val) / len(docs) < 0.4
    assert not set(train) & set(val)  # a repeated document sits in one split
    assert shards.manifest["splits"]["val"]["documents"] == len(val)
    _, other_seed = run(tmp_path, [corpus], "char", out="seed1", val_fraction=0.25, seed=1)
    assert decoded(other_seed, "val") != val
    (tmp_path / "one.txt").write_text("a single document\n")
    with pytest.warns(UserWarning, match="--val-fraction 0.01 put none of the documents in a val split"):
        _, single = run(tmp_path, [tmp_path / "one.txt"], "char", out="single", val_fraction=0.01)
    assert single.splits == ("train",)


def test_same_inputs_same_bytes_for_one_and_two_workers(tmp_path, docs_file):
    path, _ = docs_file
    _, one = run(tmp_path, [path], "char", out="one", val_fraction=0.2, workers=1)
    _, two = run(tmp_path, [path], "char", out="two", val_fraction=0.2, workers=2)
    _, again = run(tmp_path, [path], "char", out="again", val_fraction=0.2, workers=1)
    assert len(shard_bytes(one.directory)) > 6
    assert shard_bytes(one.directory) == shard_bytes(two.directory) == shard_bytes(again.directory)
    assert (one.directory / "manifest.json").read_bytes() == (two.directory / "manifest.json").read_bytes()


def _stat(directory) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in Path(directory).glob("*.array_record")}


def test_interrupted_run_resumes_without_rewriting_finished_shards(tmp_path, docs_file, monkeypatch):
    path, _ = docs_file
    _, whole = run(tmp_path, [path], "char", out="whole", val_fraction=0.2)
    real, calls = prepare_mod.write_shard, []

    def crash_after_three(docs, file):
        if len(calls) == 3:
            Path(file).write_bytes(b"half a shard")
            raise KeyboardInterrupt
        calls.append(file)
        return real(docs, file)

    monkeypatch.setattr(prepare_mod, "write_shard", crash_after_three)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, [path], "char", val_fraction=0.2)
    monkeypatch.undo()
    out = tmp_path / "out"
    manifest = read_manifest(out)
    assert not manifest["complete"] and len(manifest["shards"]) == 3 and list(out.glob("*.tmp"))
    before = _stat(out)
    summary, resumed = run(tmp_path, [path], "char", val_fraction=0.2)
    assert (summary["shards_kept"], summary["shards_written"]) == (3, len(whole.manifest["shards"]) - 3)
    after = _stat(out)
    assert all(after[name] == before[name] for name in before), "a finished shard was written again"
    assert shard_bytes(out) == shard_bytes(whole.directory) and not list(out.glob("*.tmp"))
    assert (out / "manifest.json").read_text() == (whole.directory / "manifest.json").read_text()
    # Complete: nothing to do. A shard that no longer matches its checksum is written again.
    assert run(tmp_path, [path], "char", val_fraction=0.2)[0]["shards_written"] == 0
    (out / "train-00001.array_record").write_bytes(b"corrupt")
    assert run(tmp_path, [path], "char", val_fraction=0.2)[0]["shards_written"] == 1
    assert shard_bytes(out) == shard_bytes(whole.directory)


def test_interrupted_pool_resumes_to_the_same_bytes(tmp_path, docs_file, monkeypatch):
    path, _ = docs_file
    _, whole = run(tmp_path, [path], "char", out="whole", workers=2, shard_mb=0.0005)
    real_plan = prepare_mod.plan

    def interrupted(cfg, sources):
        for k, task in enumerate(real_plan(cfg, sources)):
            if k == 9:
                raise KeyboardInterrupt
            yield task

    monkeypatch.setattr(prepare_mod, "plan", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, [path], "char", workers=2, shard_mb=0.0005)
    monkeypatch.undo()
    out = tmp_path / "out"
    before = {name: st for name, st in _stat(out).items() if name in {e["file"] for e in read_manifest(out)["shards"]}}
    assert before, "no shard finished before the interruption"
    summary, _ = run(tmp_path, [path], "char", workers=2, shard_mb=0.0005)
    assert summary["shards_kept"] == len(before)
    assert all(_stat(out)[name] == st for name, st in before.items())
    assert shard_bytes(out) == shard_bytes(whole.directory)


def test_other_options_in_the_same_out_are_refused_unless_overwrite(tmp_path, docs_file):
    path, _ = docs_file
    run(tmp_path, [path], "char")
    with pytest.raises(ConfigError, match=r"other inputs or options \(they differ in options.shard_mb\)"):
        run(tmp_path, [path], "char", shard_mb=0.002)
    summary, shards = run(tmp_path, [path], "char", shard_mb=0.002, overwrite=True)
    assert summary["shards_kept"] == 0 and shards.manifest["options"]["shard_mb"] == 0.002
    assert len(list(shards.directory.glob("*.array_record"))) == len(shards.manifest["shards"])
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds other files"):
        run(tmp_path, [path], "char", out="foreign")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tokenizer": "chr"}, "unknown tokenizer (did you mean 'char'?); choose one of: char, byte, sentencepiece"),
        ({"tokenizer": "char", "vocab_size": 500},
         "prepare.vocab_size=500: is read only with --tokenizer sentencepiece, not char (option --vocab-size)"),
        ({"tokenizer": "sentencepiece", "vocab_size": 100},
         "prepare.vocab_size=100: must be >= 300 (option --vocab-size)"),
        ({"tokenizer": "byte", "workers": 0}, "prepare.workers=0: must be >= 1 (option --workers)"),
        ({"tokenizer": "byte", "val_fraction": 1.0},
         "prepare.val_fraction=1.0: must be >= 0.0 and < 1.0 (option --val-fraction)"),
        ({"tokenizer": "byte", "documents": "page"},
         "prepare.documents='page': unknown choice; choose one of: paragraph, line, file (option --documents)"),
        ({"tokenizer": "byte", "inputs": ()}, "prepare.inputs=(): give at least one text file, directory, .jsonl or "
         ".parquet file (option --input)"),
    ],
)  # fmt: skip
def test_bad_options_name_the_field_and_the_flag(tmp_path, kw, message):
    with pytest.raises(ConfigError) as e:
        PrepareConfig(**{"inputs": ("x.txt",), "out": str(tmp_path / "o"), **kw})
    assert message in str(e.value)


def test_bad_inputs_name_the_file_and_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "ok"}\n{"body": "no text", "id": 2}\n')
    with pytest.raises(ValueError, match=r"a.jsonl, line 2: no field 'text' \(the line has: body, id\)"):
        run(tmp_path, [tmp_path / "a.jsonl"], "byte")
    (tmp_path / "b.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match="b.jsonl, line 2: not a JSON object"):
        run(tmp_path, [tmp_path / "b.jsonl"], "byte", out="b")
    (tmp_path / "c.txt").write_bytes(b"fine\n\nbad \xff byte\n")
    with pytest.raises(ValueError, match=r"c.txt: line 3, column 4 \(byte offset 10\): invalid UTF-8"):
        run(tmp_path, [tmp_path / "c.txt"], "byte", out="c")
    with pytest.raises(FileNotFoundError, match="--input: .*missing.txt does not exist"):
        run(tmp_path, [tmp_path / "missing.txt"], "byte", out="d")
    (tmp_path / "blank.jsonl").write_text('{"text": " "}\n{"text": ""}\n')
    with pytest.raises(ValueError, match=r"no non-blank document for the train split \(2 blank ones skipped\)"):
        run(tmp_path, [tmp_path / "blank.jsonl"], "byte", out="e")
    assert os.path.isdir(tmp_path / "out")  # the failed runs left their manifest, incomplete
    assert not read_manifest(tmp_path / "out")["complete"]
