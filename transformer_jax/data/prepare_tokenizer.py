"""The tokenizer of ``transformer-jax prepare``: trained by name, or read from a file.

``--tokenizer`` is ``char``, ``byte`` or ``sentencepiece`` (trained on a sample of the train split
with the classes of ``tokenizers``; ``byte`` needs no training), or a path: a Hugging Face
``tokenizer.json`` (with the ``tokenizer_config.json`` / ``special_tokens_map.json`` beside it that
name its special tokens) or a model directory holding one, or a ``tokenizer.json`` that a run or an
earlier ``prepare`` saved (``Tokenizer.save``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.registry import did_you_mean
from transformer_jax.data.hf_tokenizer import HF_CONFIG_FILE, HF_TOKENIZER_FILE, SPECIAL_TOKENS_FILE, HFTokenizer
from transformer_jax.data.tokenizers import Tokenizer, tokenizer_from_json, train_tokenizer

TRAINED = ("char", "byte", "sentencepiece")


def tokenizer_file(spec: str) -> Path | None:
    """The tokenizer file ``spec`` names (None for a name of ``TRAINED``); unknown names are errors."""
    if spec in TRAINED:
        return None
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / HF_TOKENIZER_FILE
    if path.is_file():
        return path
    if "/" in spec or spec.endswith(".json") or Path(spec).expanduser().exists():
        raise FileNotFoundError(f"--tokenizer {spec}: no tokenizer.json there; give a tokenizer.json or its directory")
    hint = did_you_mean(spec, TRAINED)
    raise ConfigError(
        f"--tokenizer={spec!r}: unknown tokenizer{f' ({hint})' if hint else ''}; choose one of: "
        f"{', '.join(TRAINED)}, or give the path of a tokenizer.json (Hugging Face, or saved by a run)"
    )


def _hf_config(directory: Path) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name in (SPECIAL_TOKENS_FILE, HF_CONFIG_FILE):
        if (directory / name).is_file():
            config.update(json.loads((directory / name).read_text()))
    return config


def read_tokenizer_file(path: Path) -> Tokenizer:
    """A tokenizer from its file: Hugging Face's ``tokenizer.json`` (has ``model``) or ours (``type``)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"--tokenizer {path}: not a JSON tokenizer file ({e})") from None
    hugging_face = isinstance(data, dict) and isinstance(data.get("model"), dict)
    if isinstance(data, dict) and "type" in data and not hugging_face:
        return tokenizer_from_json(data)
    if not hugging_face:
        raise ValueError(f"--tokenizer {path}: neither a Hugging Face tokenizer.json (no 'model') nor one of ours")
    try:
        return HFTokenizer(text, _hf_config(path.parent))
    except Exception as e:  # the tokenizers library raises its own exception types
        raise ValueError(
            f"--tokenizer {path}: {e}; a Hugging Face tokenizer.json needs a {HF_CONFIG_FILE} beside it "
            "naming its bos_token or eos_token"
        ) from None


def train_named(name: str, texts: Iterable[str], *, vocab_size: int, sp_model_type: str, seed: int) -> Tokenizer:
    """Train the tokenizer ``name`` of ``TRAINED`` on ``texts`` with the package's own training code."""
    from transformer_jax.data.tokenizer_config import SentencePieceSettings, TokenizerConfig

    settings = TokenizerConfig.VARIANTS.get(name)()
    if isinstance(settings, SentencePieceSettings):
        settings = SentencePieceSettings(vocab_size=vocab_size, model_type=sp_model_type)  # pyright: ignore[reportArgumentType]  # PrepareConfig checked it
    try:
        return train_tokenizer(settings, texts, seed)
    except RuntimeError as e:  # SentencePiece's trainer (e.g. a vocabulary larger than the sample allows)
        raise ValueError(
            f"--tokenizer {name}: training failed on the sample ({str(e).strip().splitlines()[-1]}); "
            "lower --vocab-size or raise --tokenizer-sample-mb"
        ) from None
