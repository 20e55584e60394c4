"""The data section's renamed keys: one settings class per dataset (``data.dataset``) holding only the
fields its loader reads, the tokenizer's settings inside the corpora that train one
(``data.dataset.tokenizer``). Was: 35 flat fields of every dataset and tokenizer side by side.

Each step is an (upgrade, legacy) pair acting in place on the section's dict (see the package doc)."""

from __future__ import annotations

from typing import Any

# The flat layout's fields and defaults (the committed runs hold all of them).
_OLD_DEFAULTS: dict[str, Any] = {
    "dataset": "shakespeare",
    "path": None,
    "val_path": None,
    "val_fraction": 0.1,
    "dir": None,
    "src_lang": "de",
    "tgt_lang": "en",
    "mixture": None,
    "mixture_schedule": None,
    "tfds_name": None,
    "tfds_download": False,
    "tokenizer": "char",
    "vocab_size": 8000,
    "sp_model_type": "bpe",
    "sp_byte_fallback": True,
    "sp_character_coverage": 0.9995,
    "sp_max_sentences": 2_000_000,
    "tokenizer_max_records": 2_000_000,
    "seq_len": 64,
    "max_src_len": 64,
    "packing": "stream",
    "document_split": "paragraph",
    "shuffle": True,
    "seed": 0,
    "prefetch": 2,
    "read_threads": 2,
    "worker_count": 0,
    "cache_dir": None,
    "chunk_chars": 4096,
    "max_records_in_memory": 1_000_000,
    "decode_errors": "strict",
    "task_format": "lm",
    "synthetic_train_size": 10000,
    "synthetic_val_size": 500,
    "synthetic_min_len": 4,
    "synthetic_max_len": 16,
    "synthetic_vocab": 16,
}
FLAT = ("seq_len", "shuffle", "seed", "prefetch", "read_threads", "worker_count")  # stay on DataConfig

_CORPUS = ("cache_dir", "max_records_in_memory")
_PACKED = ("packing", "document_split")
_SYNTHETIC = {
    "task_format": "format",
    "synthetic_train_size": "train_size",
    "synthetic_val_size": "val_size",
    "synthetic_min_len": "min_len",
    "synthetic_max_len": "max_len",
    "synthetic_vocab": "vocab",
    "max_src_len": "max_src_len",
}
# dataset -> {old field: its field in the dataset's settings}
_DATASETS: dict[str, dict[str, str]] = {
    "shakespeare": {k: k for k in (*_CORPUS, *_PACKED, "val_fraction", "chunk_chars")},
    "text": {k: k for k in (*_CORPUS, *_PACKED, "path", "val_path", "val_fraction", "chunk_chars", "decode_errors")},
    "parallel": {
        k: k for k in (*_CORPUS, "dir", "src_lang", "tgt_lang", "val_fraction", "decode_errors", "max_src_len")
    },
    "tfds": {
        **{k: k for k in (*_CORPUS, *_PACKED, "src_lang", "tgt_lang", "max_src_len")},
        "tfds_name": "name",
        "tfds_download": "download",
    },
    "prepared": {"path": "path", "packing": "packing"},
    "mixture": {"mixture": "mixture", "mixture_schedule": "schedule", "packing": "packing"},
    **{task: _SYNTHETIC for task in ("copy", "reverse", "sort", "associative_recall")},
}
_TRAINS_TOKENIZER = ("shakespeare", "text", "parallel", "tfds")
_SENTENCEPIECE = {
    "vocab_size": "vocab_size",
    "sp_model_type": "model_type",
    "sp_byte_fallback": "byte_fallback",
    "sp_character_coverage": "character_coverage",
    "sp_max_sentences": "max_sentences",
    "tokenizer_max_records": "max_records",
}
_TOKENIZERS: dict[str, dict[str, str]] = {
    "char": {"tokenizer_max_records": "max_records"},
    "byte": {},
    "sentencepiece": _SENTENCEPIECE,
}


def _moved(old: dict[str, Any], fields: dict[str, str], kind: str) -> dict[str, Any]:
    """``{"kind": kind, **fields}`` from the flat ``old``."""
    return {"kind": kind, **{ours: old[theirs] for theirs, ours in fields.items()}}


def _upgrade(data: dict[str, Any]) -> None:
    if not isinstance(data.get("dataset"), str):
        return
    old = {name: data.pop(name, default) for name, default in _OLD_DEFAULTS.items() if name not in FLAT}
    kind = old["dataset"]
    fields = _DATASETS.get(kind, {})
    dataset = _moved(old, fields, kind)
    if kind in _TRAINS_TOKENIZER:
        tokenizer = old["tokenizer"]
        dataset["tokenizer"] = _moved(old, _TOKENIZERS.get(tokenizer, {}), tokenizer)
    used = {*fields, "dataset", "tokenizer", *_TOKENIZERS.get(old["tokenizer"], {})}
    stray = {name: value for name, value in old.items() if name not in used and value != _OLD_DEFAULTS[name]}
    dataset.update(stray)  # set but not read by the dataset: loading refuses them, naming them
    data["dataset"] = dataset


def _legacy(data: dict[str, Any]) -> None:
    if not isinstance(data.get("dataset"), dict):
        return
    dataset = dict(data.pop("dataset"))
    kind = dataset.pop("kind")
    old = {k: v for k, v in _OLD_DEFAULTS.items() if k not in FLAT}
    old["dataset"] = kind
    old.update({theirs: dataset[ours] for theirs, ours in _DATASETS.get(kind, {}).items() if ours in dataset})
    tokenizer = dataset.get("tokenizer")
    if isinstance(tokenizer, dict):
        old["tokenizer"] = tokenizer["kind"]
        fields = _TOKENIZERS.get(tokenizer["kind"], {})
        old.update({theirs: tokenizer[ours] for theirs, ours in fields.items() if ours in tokenizer})
    data.update(old)


PATH = ("data",)
STEPS = ((_upgrade, _legacy),)

_CORPORA = "data.dataset=shakespeare, text, parallel or tfds"
_SYNTHETIC_TASKS = "data.dataset=copy, reverse, sort or associative_recall"
RENAMED: dict[str, str] = {
    "data.path": "data.dataset.path (with data.dataset=text or prepared)",
    "data.val_path": "data.dataset.val_path (with data.dataset=text)",
    "data.val_fraction": "data.dataset.val_fraction (with data.dataset=shakespeare, text or parallel)",
    "data.dir": "data.dataset.dir (with data.dataset=parallel)",
    "data.src_lang": "data.dataset.src_lang (with data.dataset=parallel or tfds)",
    "data.tgt_lang": "data.dataset.tgt_lang (with data.dataset=parallel or tfds)",
    "data.mixture": "data.dataset.mixture (with data.dataset=mixture)",
    "data.mixture_schedule": "data.dataset.schedule (with data.dataset=mixture)",
    "data.tfds_name": "data.dataset.name (with data.dataset=tfds)",
    "data.tfds_download": "data.dataset.download (with data.dataset=tfds)",
    "data.cache_dir": f"data.dataset.cache_dir (with {_CORPORA})",
    "data.max_records_in_memory": f"data.dataset.max_records_in_memory (with {_CORPORA})",
    "data.chunk_chars": "data.dataset.chunk_chars (with data.dataset=shakespeare or text)",
    "data.decode_errors": "data.dataset.decode_errors (with data.dataset=text or parallel)",
    "data.packing": "data.dataset.packing (with data.dataset=shakespeare, text, tfds, prepared or mixture)",
    "data.document_split": "data.dataset.document_split (with data.dataset=shakespeare, text or tfds)",
    "data.max_src_len": "data.dataset.max_src_len (with data.dataset=parallel, tfds or a synthetic task)",
    "data.tokenizer": f"data.dataset.tokenizer (with {_CORPORA})",
    "data.tokenizer_max_records": (
        "data.dataset.tokenizer.max_records (with data.dataset.tokenizer=char or sentencepiece)"
    ),
    **{
        f"data.{old}": f"data.dataset.tokenizer.{new} (with data.dataset.tokenizer=sentencepiece)"
        for old, new in _SENTENCEPIECE.items()
        if old != "tokenizer_max_records"
    },
    **{
        f"data.{old}": f"data.dataset.{new} (with {_SYNTHETIC_TASKS})"
        for old, new in _SYNTHETIC.items()
        if old != "max_src_len"
    },
}
