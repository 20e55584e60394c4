"""A Hugging Face tokenizer (``tokenizer.json`` through the ``tokenizers`` library) behind our
``Tokenizer`` interface.

Loaded from a model directory with ``HFTokenizer.from_pretrained(dir)`` (``tokenizer.json`` plus
``tokenizer_config.json`` / ``special_tokens_map.json`` for the special tokens), saved with a run
like every tokenizer (``save(dir)`` -> our ``tokenizer.json`` holding the Hugging Face JSON) and
exported with ``save_pretrained(dir)``. Encoding and decoding follow ``transformers``'
``AutoTokenizer`` on the same files (transformers 5): no padding or truncation, special tokens
named in the config but missing from the vocabulary added as special tokens, and the special
tokens added by ``encode(..., add_special_tokens=True)`` are those of tokenizer.json's
post-processor (transformers 5 ignores the config's ``add_bos_token``/``add_eos_token`` when a
tokenizer.json exists, and so do we).

Unlike our other tokenizers, the special ids are the checkpoint's (``bos_id``, ``eos_id``,
``pad_id``, ``unk_id`` are instance properties). A missing bos falls back to eos and a missing pad
to eos (as GPT-2 / Qwen generation does); a vocabulary without an unknown token has ``unk_id``
-1, and then the characters that encode to nothing are the unrepresentable ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformer_jax.data.tokenizers import TOKENIZERS, Tokenizer

if TYPE_CHECKING:
    from transformer_jax.data.tokenizer_config import TokenizerConfig

HF_TOKENIZER_FILE = "tokenizer.json"
HF_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
_SPECIALS = ("bos_token", "eos_token", "pad_token", "unk_token")


def _content(token: Any) -> str | None:
    """A special token of tokenizer_config.json: a string or an AddedToken dict ``{"content": ...}``."""
    return token.get("content") if isinstance(token, Mapping) else token


def _cleanup(text: str) -> str:
    """transformers' ``clean_up_tokenization`` (spaces before punctuation and contractions)."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
        text = text.replace(a, b)
    for a, b in ((" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


@TOKENIZERS.register("huggingface")
class HFTokenizer(Tokenizer):
    """``tokenizers.Tokenizer`` from its JSON, plus the tokenizer config (special tokens, flags)."""

    kind = "huggingface"

    def __init__(self, tokenizer_json: str, config: Mapping[str, Any] | None = None):
        from tokenizers import AddedToken
        from tokenizers import Tokenizer as Backend

        self.tokenizer_json = tokenizer_json
        self.config = dict(config or {})
        tok = Backend.from_str(tokenizer_json)
        tok.no_padding()
        tok.no_truncation()
        for entry in self.config.get("added_tokens_decoder", {}).values():
            if tok.token_to_id(entry["content"]) is None:
                flags = {
                    k: entry[k] for k in ("single_word", "lstrip", "rstrip", "normalized", "special") if k in entry
                }
                tok.add_tokens([AddedToken(entry["content"], **flags)])
        self._special: dict[str, int | None] = {}
        for key in _SPECIALS:
            content = _content(self.config.get(key))
            if content is not None and tok.token_to_id(content) is None:
                tok.add_special_tokens([AddedToken(content, special=True)])
            self._special[key] = None if content is None else tok.token_to_id(content)
        if self._special["bos_token"] is None and self._special["eos_token"] is None:
            raise ValueError("the tokenizer config names neither bos_token nor eos_token; set at least one")
        cleanup = bool(self.config.get("clean_up_tokenization_spaces", False))
        bpe = json.loads(tokenizer_json).get("model", {}).get("type") == "BPE"
        force = bool(self.config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"))
        self._cleanup = cleanup and (not bpe or force)
        self._tok = tok

    # Special ids ------------------------------------------------------------------------------

    @property
    def bos_id(self) -> int:  # type: ignore[override]
        s = self._special
        return s["bos_token"] if s["bos_token"] is not None else s["eos_token"]  # type: ignore[return-value]

    @property
    def eos_id(self) -> int:  # type: ignore[override]
        s = self._special
        return s["eos_token"] if s["eos_token"] is not None else s["bos_token"]  # type: ignore[return-value]

    @property
    def pad_id(self) -> int:  # type: ignore[override]
        pad = self._special["pad_token"]
        return self.eos_id if pad is None else pad

    @property
    def unk_id(self) -> int:  # type: ignore[override]
        unk = self._special["unk_token"]
        return -1 if unk is None else unk

    # Interface -------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies the post-processor (e.g. a leading
        BOS), as ``transformers``' default ``encode`` does. The data pipelines add BOS/EOS
        themselves, so the default is without."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
        text = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        return _cleanup(text) if self._cleanup else text

    def unrepresentable(self, text: str) -> list[str]:
        """Characters that encode to the unknown token, or (no unknown token) to nothing at all."""
        if self._special["unk_token"] is not None:
            return super().unrepresentable(text)
        return [c for c in dict.fromkeys(text) if not c.isspace() and not self.encode(c)]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "tokenizer": self.tokenizer_json, "config": self.config}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HFTokenizer:
        return cls(d["tokenizer"], d.get("config"))

    @classmethod
    def train(cls, settings: TokenizerConfig, texts: Iterable[str], seed: int = 0) -> HFTokenizer:
        raise ValueError(
            "a Hugging Face tokenizer comes with its checkpoint and is not trained here: load it with "
            "HFTokenizer.from_pretrained(model_dir)"
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"tokenizer_json": self.tokenizer_json, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["tokenizer_json"], state["config"])

    # Hugging Face files ----------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> HFTokenizer:
        """The tokenizer of a Hugging Face model directory (``tokenizer.json`` required)."""
        directory = Path(directory)
        file = directory / HF_TOKENIZER_FILE
        if not file.is_file():
            found = sorted(p.name for p in directory.glob("*tokenizer*")) if directory.is_dir() else []
            raise FileNotFoundError(
                f"{file} does not exist (found {found}); only fast tokenizers (tokenizer.json) are read: "
                "convert a SentencePiece/tiktoken tokenizer with transformers' AutoTokenizer(...).save_pretrained"
            )
        config: dict[str, Any] = {}
        for name in (SPECIAL_TOKENS_FILE, HF_CONFIG_FILE):
            if (directory / name).is_file():
                config.update(json.loads((directory / name).read_text()))
        return cls(file.read_text(encoding="utf-8"), config)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Writes ``tokenizer.json`` and ``tokenizer_config.json`` in Hugging Face layout."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / HF_TOKENIZER_FILE).write_text(self.tokenizer_json, encoding="utf-8")
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.config}
        (directory / HF_CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        return directory
