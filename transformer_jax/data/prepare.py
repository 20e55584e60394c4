"""``prepare``: local text, JSONL or Parquet -> sharded ArrayRecord files of token ids (``shards.py``).

    from transformer_jax.data.prepare import PrepareConfig, prepare
    summary = prepare(PrepareConfig(inputs=("corpus/",), out="prepared", tokenizer="sentencepiece"))

How the files are made, so that the same inputs and options give the same bytes:

  - Documents are read in input order (``documents.py``); each goes to ``val`` when a hash of its
    UTF-8 text (keyed by ``seed``) falls below ``val_fraction``, else to ``train``, so a repeated
    document never sits in both splits.
  - A split's documents fill its shards in order; a shard is cut once it holds ``shard_mb`` MB of
    text. Shard ``k`` of a split therefore holds the same documents whatever the number of workers.
  - A trained tokenizer (char, sentencepiece) sees a sample of the train split: the documents whose
    hash (another key) falls below ``tokenizer_sample_mb`` / input MB, at most that many MB.
  - A shard's records hold several documents each (``shards.py``): as many as make ``record_kb`` KiB
    of token ids on average over the shard, so readers hold a small index whatever the document count.
  - ``workers`` processes (``prepare_workers.py``) tokenize and write whole shards, each to
    ``NAME.tmp``, renamed when finished and then recorded in ``manifest.json`` (written after every
    shard, ``complete`` false).
    A rerun with the same inputs and options keeps the finished shards whose sha256 still matches,
    reuses the saved tokenizer, and writes only the rest (shards of an earlier format version are all
    written again); other inputs or options in a non-empty
    ``out`` are refused unless ``overwrite``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from transformer_jax.core.configlib import Config, ConfigError, fail, setting
from transformer_jax.data import documents as docs_io
from transformer_jax.data import shards
from transformer_jax.data.prepare_tokenizer import read_tokenizer_file, tokenizer_file
from transformer_jax.data.prepare_tokenizer import train_named as _train_named
from transformer_jax.data.prepare_workers import default_workers as default_workers  # `prepare` CLI
from transformer_jax.data.prepare_workers import init_worker, run_pool, write_shard
from transformer_jax.data.textio import DecodeErrors
from transformer_jax.data.tokenizer_config import SentencePieceSettings, SentencePieceType
from transformer_jax.data.tokenizers import TOKENIZER_FILE, Tokenizer, load_tokenizer

SPLITS = ("train", "val")
MB = 1_000_000

_SP_DEFAULTS = SentencePieceSettings()  # prepare's sentencepiece options default to the data.dataset.tokenizer ones


@dataclasses.dataclass(frozen=True)
class PrepareConfig(Config):
    """The options of ``transformer-jax prepare`` (each field is the ``--flag`` of the same name;
    errors name ``prepare.FIELD`` and the flag)."""

    inputs: tuple[str, ...]
    out: str
    tokenizer: str
    vocab_size: int | None = setting(None, ge=300)  # sentencepiece only (default 8000; 256 byte pieces + specials)
    sp_model_type: SentencePieceType | None = None  # sentencepiece only (default bpe)
    documents: str = setting("paragraph", choice=docs_io.DOCUMENT_UNITS)  # text files: paragraph | line | file
    field: str = "text"  # JSONL field / Parquet column
    val_fraction: float = setting(0.0, ge=0.0, lt=1.0)
    seed: int = setting(0, ge=0, lt=2**32)
    shard_mb: float = setting(64.0, gt=0.0)
    record_kb: float = setting(16.0, gt=0.0)  # KiB of token ids a record holds on average (several documents)
    workers: int = setting(1, ge=1)
    tokenizer_sample_mb: float = setting(100.0, gt=0.0)
    decode_errors: DecodeErrors = "strict"
    overwrite: bool = False

    PATH: ClassVar[str] = "prepare"

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ConfigError as e:
            raise ConfigError(_with_flag(str(e))) from None

    def check(self) -> None:
        for rule in (_some_inputs, _known_tokenizer, _sentencepiece_options, _named_field, _out_is_a_directory):
            rule(self)

    @property
    def vocab_size_(self) -> int:
        return _SP_DEFAULTS.vocab_size if self.vocab_size is None else self.vocab_size

    @property
    def sp_model_type_(self) -> str:
        return _SP_DEFAULTS.model_type if self.sp_model_type is None else self.sp_model_type

    def options(self) -> dict[str, Any]:
        """What decides the shards' bytes (stored in the manifest; a rerun must match it)."""
        path = tokenizer_file(self.tokenizer)
        if path is not None:
            tok: dict[str, Any] = {"file": str(path.resolve()), "sha256": docs_io.sha256_file(path)}
        else:
            tok = {"name": self.tokenizer}
            if self.tokenizer != "byte":
                tok["sample_mb"] = self.tokenizer_sample_mb
            if self.tokenizer == "sentencepiece":
                tok.update(vocab_size=self.vocab_size_, sp_model_type=self.sp_model_type_)
        keys = ("documents", "field", "val_fraction", "seed", "shard_mb", "record_kb", "decode_errors")
        return {"tokenizer": tok, **{k: getattr(self, k) for k in keys}}


_FLAGS = {"inputs": "--input"}


def _with_flag(message: str) -> str:
    """``prepare.FIELD=...`` messages also name the command-line flag (``--field`` with dashes)."""
    name = message.partition("=")[0].removeprefix("prepare.")
    if not message.startswith("prepare.") or not name.isidentifier():
        return message
    return f"{message} (option {_FLAGS.get(name, '--' + name.replace('_', '-'))})"


def _some_inputs(cfg: PrepareConfig) -> None:
    if isinstance(cfg.inputs, str) or not cfg.inputs:
        fail("prepare.inputs", cfg.inputs, "give at least one text file, directory, .jsonl or .parquet file")


def _known_tokenizer(cfg: PrepareConfig) -> None:
    tokenizer_file(cfg.tokenizer)  # an unknown name is an error now


def _sentencepiece_options(cfg: PrepareConfig) -> None:
    if cfg.tokenizer == "sentencepiece":
        return
    for name in ("vocab_size", "sp_model_type"):
        if getattr(cfg, name) is not None:
            fail(
                f"prepare.{name}",
                getattr(cfg, name),
                f"is read only with --tokenizer sentencepiece, not {cfg.tokenizer}",
            )


def _named_field(cfg: PrepareConfig) -> None:
    if not cfg.field:
        fail("prepare.field", cfg.field, "must name a JSONL field / Parquet column")


def _out_is_a_directory(cfg: PrepareConfig) -> None:
    if Path(cfg.out).expanduser().exists() and not Path(cfg.out).expanduser().is_dir():
        fail("prepare.out", cfg.out, "is a file", "give a directory for the shards")


@dataclasses.dataclass
class Task:
    """One shard to write: its split, index and documents (``text_bytes`` of UTF-8)."""

    split: str
    index: int
    docs: list[str]
    text_bytes: int

    @property
    def file(self) -> str:
        return shards.shard_name(self.split, self.index)


def _unit(data: bytes, seed: int, purpose: bytes) -> float:
    """A hash of ``data`` as a number in [0, 1), one independent hash per ``purpose``."""
    digest = hashlib.blake2b(data, digest_size=8, key=seed.to_bytes(8, "little"), person=purpose).digest()
    return int.from_bytes(digest, "little") / 2**64


def _documents(cfg: PrepareConfig, sources: list[docs_io.Source]) -> Iterator[tuple[str, str, bytes]]:
    """(split, document, its UTF-8 bytes) of every input document, in order."""
    for source in sources:
        for doc in docs_io.read_documents(source, unit=cfg.documents, field=cfg.field, errors=cfg.decode_errors):
            data = doc.encode("utf-8")
            val = cfg.val_fraction > 0 and _unit(data, cfg.seed, b"val") < cfg.val_fraction
            yield ("val" if val else "train"), doc, data


def plan(cfg: PrepareConfig, sources: list[docs_io.Source]) -> Iterator[Task]:
    """The shards in the order their last document is read (deterministic)."""
    limit = cfg.shard_mb * MB
    pending: dict[str, Task] = {s: Task(s, 0, [], 0) for s in SPLITS}
    for split, doc, data in _documents(cfg, sources):
        task = pending[split]
        task.docs.append(doc)
        task.text_bytes += len(data)
        if task.text_bytes >= limit:
            yield task
            pending[split] = Task(split, task.index + 1, [], 0)
    yield from (task for task in pending.values() if task.docs)


def tokenizer_sample(cfg: PrepareConfig, sources: list[docs_io.Source]) -> Iterator[str]:
    """Train-split documents sampled by hash: about ``tokenizer_sample_mb`` MB, never more."""
    budget = cfg.tokenizer_sample_mb * MB
    rate = min(1.0, budget / max(1, sum(s.bytes for s in sources)))
    taken = 0
    for split, doc, data in _documents(cfg, sources):
        if split == "train" and (rate >= 1.0 or _unit(data, cfg.seed, b"sample") < rate):
            taken += len(data)
            if taken > budget:
                return
            yield doc


# The run ------------------------------------------------------------------------------------

_OURS = (shards.MANIFEST, shards.MANIFEST + ".tmp", TOKENIZER_FILE)


def _is_ours(name: str) -> bool:
    return name in _OURS or name.endswith((shards.SUFFIX, shards.SUFFIX + ".tmp"))


def _clear(out: Path) -> None:
    for p in out.iterdir():
        if p.is_file() and _is_ours(p.name):
            p.unlink()


def _differences(old: dict, new: dict) -> list[str]:
    diff = [f"options.{k}" for k in sorted(set(old["options"]) | set(new["options"])) if
            old["options"].get(k) != new["options"].get(k)]  # fmt: skip
    keys = ("path", "format", "bytes", "sha256")
    if [{k: s.get(k) for k in keys} for s in old["sources"]] != [{k: s[k] for k in keys} for s in new["sources"]]:
        diff.append("sources (the input files or their contents)")
    return diff


def _resume(cfg: PrepareConfig, out: Path, new: dict) -> tuple[dict[str, dict], Tokenizer | None]:
    """(finished shard entries by file, saved tokenizer) to keep from an earlier run in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if cfg.overwrite:
        _clear(out)
    if not (out / shards.MANIFEST).is_file():
        foreign = sorted(p.name for p in out.iterdir() if not _is_ours(p.name))
        if foreign:
            raise ConfigError(
                f"--out {out} holds other files ({', '.join(foreign[:3])}) and no manifest.json; give an "
                "empty or new directory"
            )
        _clear(out)
        return {}, None
    try:
        old = shards.read_manifest(out)
    except shards.FormatVersionError:  # shards of an earlier format: write them all again
        _clear(out)
        return {}, None
    except ValueError as e:
        raise ConfigError(f"--out {out}: {e}; or add --overwrite to replace it") from None
    diff = _differences(old, new)
    if diff:
        raise ConfigError(
            f"--out {out} holds shards of other inputs or options (they differ in {', '.join(diff)}); give "
            "another --out, or add --overwrite to replace them"
        )
    tok_path = out / TOKENIZER_FILE
    if not tok_path.is_file() or docs_io.sha256_file(tok_path) != old["tokenizer"]["sha256"]:
        _clear(out)  # without its tokenizer no shard can be trusted
        return {}, None
    for p in out.glob("*.tmp"):
        p.unlink()
    kept = {e["file"]: e for e in old["shards"]
            if (out / e["file"]).is_file() and docs_io.sha256_file(out / e["file"]) == e["sha256"]}  # fmt: skip
    return kept, load_tokenizer(out)


def _train(cfg: PrepareConfig, sources: list[docs_io.Source]) -> Tokenizer:
    path = tokenizer_file(cfg.tokenizer)
    if path is not None:
        return read_tokenizer_file(path)
    texts = tokenizer_sample(cfg, sources) if cfg.tokenizer != "byte" else iter(())
    kw = {"vocab_size": cfg.vocab_size_, "sp_model_type": cfg.sp_model_type_, "seed": cfg.seed}
    return _train_named(cfg.tokenizer, texts, **kw)


def _summaries(entries: list[dict]) -> dict[str, dict]:
    out = {}
    for split in SPLITS:
        mine = [e for e in entries if e["split"] == split]
        if split == "train" or mine:
            out[split] = {k: sum(e[k] for e in mine) for k in ("documents", "tokens", "unk_tokens", "text_bytes")}
            out[split]["shards"] = [e["file"] for e in mine]
    return out


def prepare(cfg: PrepareConfig, *, progress: bool | None = None) -> dict[str, Any]:
    """Writes (or completes) the shards of ``cfg.inputs`` in ``cfg.out``; returns a summary.
    ``progress``: show the tqdm bar (None: when stderr is a terminal)."""
    import tqdm

    start = time.perf_counter()
    out = Path(cfg.out).expanduser()
    sources = docs_io.input_files(cfg.inputs)
    manifest: dict[str, Any] = {
        "format": shards.FORMAT,
        "format_version": shards.FORMAT_VERSION,
        "complete": False,
        "sources": [s.to_json() for s in sources],
        "options": cfg.options(),
    }
    kept, tokenizer = _resume(cfg, out, manifest)
    if tokenizer is None:
        tokenizer = _train(cfg, sources)
        tokenizer.save(out)
    dtype = shards.token_dtype(tokenizer.vocab_size)
    manifest |= {
        "tokenizer": {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size, "file": TOKENIZER_FILE,
                      "sha256": docs_io.sha256_file(out / TOKENIZER_FILE), "bos_id": tokenizer.bos_id,
                      "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id, "unk_id": tokenizer.unk_id},
        "dtype": dtype.str, "record": shards.RECORD, "writer_options": shards.WRITER_OPTIONS,
        "shards": sorted(kept.values(), key=lambda e: (SPLITS.index(e["split"]), e["index"])),
    }  # fmt: skip
    shards.write_manifest(out, manifest)
    total = sum(s.bytes for s in sources) if all(s.format == "text" for s in sources) else None
    disable = None if progress is None else not progress
    bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, desc="prepare", disable=disable)
    counts = {"written": 0, "kept": 0, "bytes": 0}

    def finished(task: Task, result: dict[str, Any]) -> None:
        os.replace(out / (task.file + ".tmp"), out / task.file)
        entry = {"file": task.file, "split": task.split, "index": task.index, "text_bytes": task.text_bytes, **result}
        manifest["shards"].append(entry)
        shards.write_manifest(out, manifest)
        counts["written"] += 1
        counts["bytes"] += task.text_bytes
        bar.update(task.text_bytes)

    def todo() -> Iterator[Task]:
        for task in plan(cfg, sources):
            done = kept.get(task.file)
            if done and (done["documents"], done["text_bytes"]) == (len(task.docs), task.text_bytes):
                counts["kept"] += 1
                bar.update(task.text_bytes)
                continue
            if done:  # finished by a run that cut the shards otherwise: write it again
                manifest["shards"] = [e for e in manifest["shards"] if e["file"] != task.file]
            yield task

    init = (json.dumps(tokenizer.to_json()), dtype.str, cfg.record_kb * 1024)
    try:
        if cfg.workers == 1:
            init_worker(*init)
            for task in todo():
                finished(task, write_shard(task.docs, str(out / (task.file + ".tmp"))))
        else:
            run_pool(cfg.workers, init, todo(), out, finished)
    finally:
        bar.close()
    manifest["shards"].sort(key=lambda e: (SPLITS.index(e["split"]), e["index"]))
    manifest["splits"] = _summaries(manifest["shards"])
    by_path = {str(s.path): s for s in sources}
    for entry in manifest["sources"]:
        entry |= {"documents": by_path[entry["path"]].documents, "skipped": by_path[entry["path"]].skipped}
    if not manifest["splits"]["train"]["documents"]:
        skipped = sum(s.skipped for s in sources)
        raise ValueError(
            f"--input {', '.join(cfg.inputs)}: no non-blank document for the train split ({skipped} blank ones "
            "skipped); check --field, --documents and --val-fraction"
        )
    if cfg.val_fraction and "val" not in manifest["splits"]:
        warnings.warn(f"--val-fraction {cfg.val_fraction} put none of the documents in a val split", stacklevel=2)
    manifest["complete"] = True
    shards.write_manifest(out, manifest)
    seconds = time.perf_counter() - start
    splits = manifest["splits"]
    return {
        "out": str(out),
        "tokenizer": tokenizer.kind,
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.str,
        **{f"{s}_{k}": splits[s][k] for s in splits for k in ("documents", "tokens")},
        "shards_written": counts["written"],
        "shards_kept": counts["kept"],
        "unk_tokens": sum(v["unk_tokens"] for v in splits.values()),
        "mb_written": counts["bytes"] / MB,
        "seconds": seconds,
        "mb_per_s": counts["bytes"] / MB / seconds,
    }
