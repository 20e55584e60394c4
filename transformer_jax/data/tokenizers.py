"""Tokenizers: character, byte, SentencePiece (BPE/unigram) and the synthetic tasks' symbols.

All share the special ids ``pad=0, bos=1, eos=2, unk=3``. ``decode`` skips pad/bos/eos (it
stops nowhere). ``to_json()`` holds everything needed to rebuild the tokenizer (SentencePiece
keeps its model bytes inside, base64), so it travels with a checkpoint: ``save(dir)`` writes
``dir/tokenizer.json`` and ``load_tokenizer(dir)`` reads it back.
"""

from __future__ import annotations

import abc
import base64
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from etils import epath

from transformer_jax.core.registry import Registry
from transformer_jax.core.tokens import BOS_ID, EOS_ID, N_SPECIAL, PAD_ID, SEP_ID, UNK_ID

if TYPE_CHECKING:
    from transformer_jax.data.tokenizer_config import TokenizerConfig

TOKENIZER_FILE = "tokenizer.json"

TOKENIZERS: Registry[type[Tokenizer]] = Registry("tokenizer")


class Tokenizer(abc.ABC):
    """Text <-> int ids. Subclasses are final; they are registered in ``TOKENIZERS``."""

    kind: ClassVar[str]
    pad_id: ClassVar[int] = PAD_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID
    unk_id: ClassVar[int] = UNK_ID

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int: ...

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]: ...

    def encode_np(self, text: str) -> np.ndarray:
        """``encode`` as an int32 array (vectorised where the tokenizer allows)."""
        return np.asarray(self.encode(text), dtype=np.int32)

    @abc.abstractmethod
    def decode(self, ids: Iterable[int]) -> str: ...

    def unrepresentable(self, text: str) -> list[str]:
        """The distinct characters of ``text`` (in order of appearance) that encode to ``unk_id``."""
        return [c for c in dict.fromkeys(text) if self.unk_id in self.encode(c)]

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]: ...

    @classmethod
    @abc.abstractmethod
    def from_json(cls, d: dict[str, Any]) -> Tokenizer: ...

    @classmethod
    @abc.abstractmethod
    def train(cls, settings: TokenizerConfig, texts: Iterable[str], seed: int) -> Tokenizer:
        """A tokenizer trained on ``texts`` (the training split only) as ``settings`` say."""

    def save(self, directory: str | os.PathLike) -> epath.Path:
        path = epath.Path(directory) / TOKENIZER_FILE  # a gs:// workdir where the environment provides it
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json()))
        return path

    def _content_ids(self, ids: Iterable[int]) -> list[int]:
        out = []
        for i in np.asarray(list(ids), dtype=np.int64).reshape(-1).tolist():
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if i not in (PAD_ID, BOS_ID, EOS_ID):
                out.append(i)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


@TOKENIZERS.register("char")
class CharTokenizer(Tokenizer):
    """One id per character of the training text (sorted), after the 4 specials.

    Characters not seen in training encode to ``unk_id`` (with a one-time warning) and decode
    to U+FFFD.
    """

    kind = "char"

    def __init__(self, chars: str):
        chars = "".join(sorted(set(chars)))
        if not chars:
            raise ValueError("CharTokenizer needs at least one character (is the training text empty?)")
        self.chars = chars
        self._codes = np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)
        self._warned = False

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + len(self.chars)

    def encode_np(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        idx = np.minimum(np.searchsorted(self._codes, codes), len(self._codes) - 1)
        known = self._codes[idx] == codes
        if not self._warned and not known.all():
            self._warned = True
            unknown = sorted(set(np.asarray(codes)[~known].tolist()))[:10]
            warnings.warn(
                "CharTokenizer: characters not in the training vocabulary map to unk_id "
                f"(first ones: {''.join(map(chr, unknown))!r}); this warning is shown once",
                stacklevel=2,
            )
        return np.where(known, idx + N_SPECIAL, UNK_ID).astype(np.int32)

    def encode(self, text: str) -> list[int]:
        return self.encode_np(text).tolist()

    def unrepresentable(self, text: str) -> list[str]:
        return [c for c in dict.fromkeys(text) if c not in self.chars]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join("\ufffd" if i == UNK_ID else self.chars[i - N_SPECIAL] for i in self._content_ids(ids))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "chars": self.chars}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CharTokenizer:
        return cls(d["chars"])

    @classmethod
    def train(cls, settings: TokenizerConfig | None, texts: Iterable[str], seed: int = 0) -> CharTokenizer:
        chars: set[str] = set()
        for text in texts:
            chars.update(text)
        return cls("".join(chars))


@TOKENIZERS.register("byte")
class ByteTokenizer(Tokenizer):
    """UTF-8 bytes: id = byte + 4 (vocab 260). Round-trips any Unicode text."""

    kind = "byte"

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + 256

    def encode_np(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32) + N_SPECIAL

    def encode(self, text: str) -> list[int]:
        return self.encode_np(text).tolist()

    def decode(self, ids: Iterable[int]) -> str:
        data = bytes(i - N_SPECIAL for i in self._content_ids(ids) if i >= N_SPECIAL)
        return data.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ByteTokenizer:
        return cls()

    @classmethod
    def train(cls, settings: TokenizerConfig | None, texts: Iterable[str], seed: int = 0) -> ByteTokenizer:
        return cls()


@TOKENIZERS.register("sentencepiece")
class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (BPE or unigram) trained on the training split.

    Trained with ``"\\n"`` as a user-defined symbol (newlines survive, for LM text), no
    whitespace collapsing, ``nmt_nfkc`` normalisation and, by default, byte fallback (no unk).
    Round trips hold up to that normalisation.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        import sentencepiece as spm

        self.model_proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        got = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
        if got != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                f"SentencePiece model has special ids (pad, bos, eos, unk)={got}; "
                f"expected {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}: retrain it with train()"
            )

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode(self._content_ids(ids))

    def pieces(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "model": base64.b64encode(self.model_proto).decode("ascii")}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SentencePieceTokenizer:
        return cls(base64.b64decode(d["model"]))

    def __getstate__(self) -> dict[str, Any]:
        return {"model_proto": self.model_proto}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["model_proto"])

    @classmethod
    def train(cls, settings: TokenizerConfig, texts: Iterable[str], seed: int = 0) -> SentencePieceTokenizer:
        import io

        import sentencepiece as spm

        def sentences():
            for text in texts:
                for line in text.split("\n"):
                    if line.strip():
                        yield line

        from transformer_jax.data.tokenizer_config import SentencePieceSettings

        if not isinstance(settings, SentencePieceSettings):
            raise TypeError(f"SentencePiece is trained with SentencePieceSettings, not {settings!r}")
        spm.set_random_generator_seed(seed)
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            vocab_size=settings.vocab_size,
            model_type=settings.model_type,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            user_defined_symbols=["\n"],
            byte_fallback=settings.byte_fallback,
            character_coverage=settings.character_coverage,
            hard_vocab_limit=False,
            remove_extra_whitespaces=False,
            normalization_rule_name="nmt_nfkc",
            input_sentence_size=settings.max_sentences,
            shuffle_input_sentence=True,
            num_threads=1,
            minloglevel=2,
        )
        return cls(model.getvalue())


@TOKENIZERS.register("symbols")
class SymbolTokenizer(Tokenizer):
    """The synthetic tasks' vocabulary: specials, SEP (id 4, written ``|``), symbols ``0..n-1``.

    Text is whitespace-separated: ``"3 1 2 | 1 2 3"``; symbol ``k`` has id ``5 + k``.
    """

    kind = "symbols"

    def __init__(self, n_symbols: int):
        if n_symbols < 1:
            raise ValueError(f"n_symbols={n_symbols}; need at least 1")
        self.n_symbols = int(n_symbols)

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + 1 + self.n_symbols

    @property
    def sep_id(self) -> int:
        return SEP_ID

    def symbol_ids(self, symbols: Sequence[int]) -> list[int]:
        return [SEP_ID + 1 + int(s) for s in symbols]

    def unrepresentable(self, text: str) -> list[str]:
        """The distinct words that are neither ``|`` nor a symbol ``0..n-1``."""
        return [w for w in dict.fromkeys(text.split()) if self.encode(w) == [UNK_ID]]

    def encode(self, text: str) -> list[int]:
        out = []
        for word in text.split():
            if word == "|":
                out.append(SEP_ID)
            elif word.isdigit() and int(word) < self.n_symbols:
                out.append(SEP_ID + 1 + int(word))
            else:
                out.append(UNK_ID)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        names = {UNK_ID: "?", SEP_ID: "|"}
        return " ".join(names.get(i, str(i - SEP_ID - 1)) for i in self._content_ids(ids))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "n_symbols": self.n_symbols}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SymbolTokenizer:
        return cls(d["n_symbols"])

    @classmethod
    def train(cls, settings: TokenizerConfig, texts: Iterable[str], seed: int = 0) -> SymbolTokenizer:
        raise TypeError("the synthetic tasks' symbols are not trained: SymbolTokenizer(n_symbols)")


def train_tokenizer(settings: TokenizerConfig, texts: Iterable[str], seed: int = 0) -> Tokenizer:
    """Train the tokenizer ``settings`` name (``settings.kind``) on ``texts`` (the training split only)."""
    return TOKENIZERS.get(settings.kind).train(settings, texts, seed)


def tokenizer_from_json(d: dict[str, Any]) -> Tokenizer:
    if not isinstance(d, dict) or "type" not in d:
        raise ValueError(f"not a tokenizer description (no 'type' key): {str(d)[:100]}")
    try:
        cls = TOKENIZERS.get(d["type"])
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    return cls.from_json(d)


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Read ``directory/tokenizer.json`` (written by ``Tokenizer.save``)."""
    path = epath.Path(directory) / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; save the tokenizer with tokenizer.save(dir)")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); the file is corrupt") from None
    return tokenizer_from_json(d)
