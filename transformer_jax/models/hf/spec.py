"""What a Hugging Face family module declares: a config mapping both ways (``Family.to_config`` /
``Family.to_hf``) and a parameter-name mapping both ways (a list of ``Link``s), registered in
``FAMILIES`` by ``model_type``.

A ``Link`` ties one group of checkpoint tensors to one group of our parameters (dotted nnx paths,
``layers.layers.3.self_attn.q.kernel``) with a function each way; most are one to one (a torch
``Linear`` weight [out, in] <-> our kernel [in, *out]), some fuse or split (GPT-2's ``c_attn``,
Mixtral's per-expert matrices <-> our stacked [E, D, F] kernels).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.core.registry import Registry
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.safetensors_io import aligned_empty

Arrays = tuple[np.ndarray, ...]


@dataclasses.dataclass(frozen=True)
class Link:
    """Checkpoint tensors ``hf`` <-> our parameters ``ours``: ``to_ours(*hf_arrays)`` returns the
    parameters in the order of ``ours``, ``to_hf(*our_arrays)`` the tensors in the order of ``hf``.
    A link with no ``ours`` only checks its tensors (``to_ours`` raises when they disagree)."""

    hf: tuple[str, ...]
    ours: tuple[str, ...]
    to_ours: Callable[..., Arrays]
    to_hf: Callable[..., Arrays]


def _n(shape: Sequence[int]) -> int:
    return math.prod(shape)


_TILE = 256


def transpose_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``dst[...] = src.T`` for 2-D arrays, tile by tile (about 3x faster than one strided copy)."""
    rows, cols = src.shape
    for i in range(0, rows, _TILE):
        for j in range(0, cols, _TILE):
            dst[j : j + _TILE, i : i + _TILE] = src[i : i + _TILE, j : j + _TILE].T
    return dst


_XLA_MIN_SIZE = 1 << 16


@functools.cache
def _xla_transpose():
    return jax.jit(jnp.transpose)


def transposed(w: np.ndarray) -> np.ndarray:
    """``w.T`` (2-D) as a C-contiguous, 64-byte aligned array. On a CPU backend large ones go
    through XLA's tiled, multi-threaded transpose (about 2x numpy's tiles here), with the input
    adopted and the output viewed without copies; elsewhere numpy tiles on the host."""
    if w.size >= _XLA_MIN_SIZE and jax.default_backend() == "cpu":
        return np.asarray(_xla_transpose()(jax.device_put(w)))
    return transpose_into(aligned_empty(w.shape[::-1], w.dtype), w)


def copy(hf: str, ours: str) -> Link:
    """The same array on both sides (norm scales, embeddings, biases of the same shape)."""
    return Link((hf,), (ours,), lambda a: (a,), lambda a: (a,))


def reshaped(hf: str, ours: str, shape: tuple[int, ...]) -> Link:
    """A flat HF vector <-> our ``shape`` (e.g. a q bias [H*Dh] <-> [H, Dh])."""
    return Link((hf,), (ours,), lambda a: (a.reshape(shape),), lambda a: (a.reshape(-1),))


def linear(hf: str, ours: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> Link:
    """A torch ``nn.Linear`` weight [out, in] <-> our kernel ``in_shape + out_shape``."""
    return Link(
        (hf,),
        (ours,),
        lambda w: (transposed(w).reshape(in_shape + out_shape),),
        lambda k: (transposed(k.reshape(_n(in_shape), _n(out_shape))),),
    )


def conv1d(hf: str, ours: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> Link:
    """A GPT-2 ``Conv1D`` weight [in, out] <-> our kernel ``in_shape + out_shape``."""
    return Link(
        (hf,),
        (ours,),
        lambda w: (w.reshape(in_shape + out_shape),),
        lambda k: (k.reshape(_n(in_shape), _n(out_shape)),),
    )


def split_last(hf: str, ours: Sequence[str], shapes: Sequence[tuple[int, ...]], lead: int) -> Link:
    """One HF tensor whose last axis concatenates several of ours (GPT-2's fused q|k|v): the
    leading ``lead`` axes are kept, the rest of each part reshaped to its shape."""
    sizes = [_n(s[lead:]) for s in shapes]
    cuts = np.cumsum(sizes)[:-1].tolist()

    def to_ours(w):
        return tuple(p.reshape(s) for p, s in zip(np.split(w, cuts, axis=-1), shapes))

    def to_hf(*parts):
        return (np.concatenate([p.reshape(p.shape[:lead] + (-1,)) for p in parts], axis=-1),)

    return Link((hf,), tuple(ours), to_ours, to_hf)


def stacked_linear(hf: Sequence[str], ours: str) -> Link:
    """One torch ``Linear`` weight [out, in] per expert <-> our stacked kernel [E, in, out]."""

    def to_ours(*ws):
        out = aligned_empty((len(ws), *ws[0].shape[::-1]), ws[0].dtype)
        for e, w in enumerate(ws):
            transpose_into(out[e], w)
        return (out,)

    return Link(tuple(hf), (ours,), to_ours, lambda k: tuple(transposed(k[e]) for e in range(len(k))))


class TensorMismatch(ValueError):
    """Checkpoint tensors that must agree do not (raised by a link's ``to_ours``)."""


def equal_to(hf: str, other: str, why: str) -> Link:
    """A checkpoint tensor we do not load because it must equal ``other`` (a tied output head
    stored anyway): loading checks the equality; saving never writes it."""

    def check(a, b):
        if a.shape != b.shape or not np.array_equal(a, b):
            raise TensorMismatch(f"checkpoint tensor {hf!r} differs from {other!r} although {why}")
        return ()

    return Link((hf, other), (), check, lambda: ())


# Config keys ---------------------------------------------------------------------------------

# Bookkeeping, generation defaults and tokenizer ids: they change neither the weights nor the
# forward pass of a causal LM.
GENERIC_IGNORED = frozenset(
    (
        "architectures",
        "model_type",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "_name_or_path",
        "name_or_path",
        "use_cache",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "output_scores",
        "return_dict_in_generate",
        "tokenizer_class",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "prefix",
        "task_specific_params",
        "finetuning_task",
        "chunk_size_feed_forward",
        "torchscript",
        "_attn_implementation",
        "attn_implementation",
        "_commit_hash",
        "_attn_implementation_autoset",
        "max_length",
        "min_length",
        "do_sample",
        "early_stopping",
        "num_beams",
        "num_beam_groups",
        "diversity_penalty",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "repetition_penalty",
        "length_penalty",
        "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size",
        "bad_words_ids",
        "num_return_sequences",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
        "cache_implementation",
        "tf_legacy_loss",
        "use_bfloat16",
        "is_decoder",
    )
)
# Generic keys we accept only at the value that means "a plain causal LM".
GENERIC_EXPECTED: dict[str, tuple[Any, ...]] = {
    "is_encoder_decoder": (False,),
    "add_cross_attention": (False,),
    "tie_encoder_decoder": (False,),
    "cross_attention_hidden_size": (None,),
    "pruned_heads": ({},),
}


class ConfigReader:
    """A ``config.json`` dict read key by key; ``finish()`` raises on any key nobody read.

    ``get``/``need`` map a key, ``ignore`` declares keys that do not affect the weights or the
    forward pass, ``expect`` accepts a key only at given values. So every key is either mapped,
    known to be irrelevant, or an error naming it.
    """

    def __init__(self, d: Mapping[str, Any], family: str):
        self.d, self.family, self.seen = dict(d), family, set()

    def _where(self, key: str) -> str:
        return f"{self.family} config.json key {key!r}"

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        value = self.d.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        if self.d.get(key) is None:
            raise ValueError(f"{self._where(key)} is missing; it is required to build the model")
        return self.get(key)

    def ignore(self, *keys: str) -> None:
        self.seen.update(keys)

    def expect(self, key: str, allowed: tuple[Any, ...], why: str) -> Any:
        self.seen.add(key)
        if key in self.d and self.d[key] not in allowed:
            raise ValueError(
                f"{self._where(key)}={self.d[key]!r} is not supported ({why}); supported: "
                + ", ".join(map(repr, allowed))
            )
        return self.d.get(key, allowed[0])

    def unsupported(self, key: str, why: str) -> ValueError:
        return ValueError(f"{self._where(key)}={self.d.get(key)!r} is not supported: {why}")

    def finish(self) -> None:
        for key, allowed in GENERIC_EXPECTED.items():
            if key not in self.seen and key in self.d:
                self.expect(key, allowed, "a plain causal language model")
        unknown = sorted(k for k in self.d if k not in self.seen and k not in GENERIC_IGNORED)
        if unknown:
            shown = ", ".join(f"{k}={self.d[k]!r}" for k in unknown)
            raise ValueError(
                f"{self.family} config.json has key(s) this converter does not know: {shown}. They may change "
                "the model; add them to the family module in transformer_jax/models/hf/ (mapped, or ignored "
                "with the reason) rather than dropping them"
            )


# Families ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Family:
    """One Hugging Face ``model_type``.

    ``to_config(reader)``: ModelConfig fields from config.json, as `models.config.with_changes` takes
    them (``d_model``... set ``model.dims``'s; every key read, ignored with a reason, or an error).
    ``to_hf(cfg)``: the config.json entries of a ModelConfig (the caller checks that it maps back to the
    same config). ``links(cfg, names)``: the tensor mapping for a config, given the checkpoint's tensor
    names when loading (a family may accept several layouts) or None when saving. ``derived``:
    checkpoint tensors that carry nothing to load (buffers recomputed from the config), by predicate on
    the name. ``skipped(cfg, names)``: ``(tensors, why)``, checkpoint tensors that are real weights with
    no place in a DecoderLM of ``cfg`` (DeepSeek-V3's multi-token prediction layers); loading leaves
    them unread with a warning that names them and says why. ``architectures``: the ``architectures``
    entries accepted, the first one written.
    """

    name: str
    architectures: tuple[str, ...]
    to_config: Callable[[ConfigReader], dict[str, Any]]
    to_hf: Callable[[ModelConfig], dict[str, Any]]
    links: Callable[[ModelConfig, AbstractSet[str] | None], list[Link]]
    derived: Callable[[str], bool] = lambda name: False
    skipped: Callable[[ModelConfig, AbstractSet[str]], tuple[AbstractSet[str], str]] = lambda cfg, names: (set(), "")


FAMILIES: Registry[Family] = Registry("Hugging Face model_type")


def register(family: Family) -> Family:
    return FAMILIES.register(family.name, family)
