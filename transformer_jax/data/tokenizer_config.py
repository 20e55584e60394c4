"""Settings of the tokenizer a corpus trains on its training split (``data.dataset.tokenizer``): one
class per tokenizer, chosen by name, each with only the fields its training reads.

``--set data.dataset.tokenizer=sentencepiece`` chooses `SentencePieceSettings`,
``--set data.dataset.tokenizer.vocab_size=16000`` sets its vocabulary. The pipeline registers the
tokenizers under the same names (``tokenizers.TOKENIZERS``); this module does not import it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from transformer_jax.core.configlib import Variant, fail, setting, variant
from transformer_jax.core.registry import Registry

SentencePieceType = Literal["bpe", "unigram"]


class TokenizerConfig(Variant):
    """How a tokenizer is trained (``tokenizers.TOKENIZERS`` has its implementation by the same name)."""

    PATH = "data.dataset.tokenizer"
    VARIANTS: ClassVar[Registry[type[TokenizerConfig]]] = Registry("tokenizer")

    def records(self) -> int | None:
        """How many records of the training split the tokenizer is trained on (None: it reads none)."""
        return None


@variant("char")
@dataclasses.dataclass(frozen=True)
class CharSettings(TokenizerConfig):
    """One id per character seen in the first ``max_records`` records of the training split."""

    max_records: int = setting(2_000_000, ge=1)

    def records(self) -> int | None:
        return self.max_records


@variant("byte")
@dataclasses.dataclass(frozen=True)
class ByteSettings(TokenizerConfig):
    """One id per UTF-8 byte: nothing to train."""


@variant("sentencepiece")
@dataclasses.dataclass(frozen=True)
class SentencePieceSettings(TokenizerConfig):
    """BPE or unigram pieces (``model_type``) trained on the first ``max_records`` records of the
    training split, of which SentencePiece samples ``max_sentences`` lines; ``byte_fallback``: bytes
    for characters outside ``character_coverage`` (no unknown token)."""

    vocab_size: int = setting(8000, ge=8)
    model_type: SentencePieceType = "bpe"
    byte_fallback: bool = True
    character_coverage: float = setting(0.9995, gt=0.0, le=1.0)
    max_sentences: int = setting(2_000_000, ge=1)
    max_records: int = setting(2_000_000, ge=1)

    def records(self) -> int | None:
        return self.max_records

    def check(self) -> None:
        _room_for_pieces(self)


def _room_for_pieces(cfg: SentencePieceSettings) -> None:
    """SentencePiece needs room for its pieces: 256 byte pieces with byte fallback."""
    low = 300 if cfg.byte_fallback else 8
    if cfg.vocab_size < low:
        fail(
            f"{cfg.PATH}.vocab_size",
            cfg.vocab_size,
            "is too small for SentencePiece" + (" with byte fallback (256 byte pieces)" if cfg.byte_fallback else ""),
            f"use >= {low}" + (f" or set {cfg.PATH}.byte_fallback=false" if cfg.byte_fallback else ""),
        )
