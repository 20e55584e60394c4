"""Next-token selection rules, one settings class per rule, chosen by name: greedy, temperature
sampling, top-k, top-p (beam search lives in ``decode.beam``).

Each rule's ``pick(logits_BV, key) -> tokens_B`` is pure, batched and deterministic for a key.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from transformer_jax.core.configlib import Variant, fail, setting, variant
from transformer_jax.core.registry import Registry

_HOT = "temperature 0 is greedy decoding: use Greedy() (--strategy greedy)"


class SamplingConfig(Variant):
    """How the next token is chosen from the logits (``VARIANTS``: greedy | sample | top_k | top_p)."""

    PATH = "sample"
    VARIANTS: typing.ClassVar[Registry[type[SamplingConfig]]] = Registry("decoding strategy")

    def pick(self, logits_BV: Float[Array, "B V"], key: jax.Array | None) -> Int[Array, " B"]:
        """The next token of each row."""
        raise NotImplementedError


def top_k_logits(logits_BV: Float[Array, "B V"], k: int) -> Float[Array, "B V"]:
    """Logits outside the k largest set to -inf (ties at the threshold are kept)."""
    k = min(k, logits_BV.shape[-1])
    threshold = jax.lax.top_k(logits_BV, k)[0][..., -1:]
    return jnp.where(logits_BV < threshold, -jnp.inf, logits_BV)


def top_p_logits(logits_BV: Float[Array, "B V"], p: float) -> Float[Array, "B V"]:
    """Nucleus filtering: keep the most likely tokens until their probability first reaches p."""
    order = jnp.argsort(-logits_BV, axis=-1)
    sorted_logits = jnp.take_along_axis(logits_BV, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = before < p
    keep = jnp.zeros_like(keep_sorted).at[jnp.arange(logits_BV.shape[0])[:, None], order].set(keep_sorted)
    return jnp.where(keep, logits_BV, -jnp.inf)


def _draw(key: jax.Array | None, logits_BV: Float[Array, "B V"]) -> Int[Array, " B"]:
    if key is None:
        raise ValueError("a sampling strategy needs a random key (only greedy decoding takes key=None)")
    return jax.random.categorical(key, logits_BV, axis=-1).astype(jnp.int32)


@variant("greedy")
@dataclasses.dataclass(frozen=True)
class Greedy(SamplingConfig):
    """The most likely token (no randomness)."""

    def pick(self, logits_BV: Float[Array, "B V"], key: jax.Array | None) -> Int[Array, " B"]:
        del key
        return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)


@variant("sample")
@dataclasses.dataclass(frozen=True)
class Sample(SamplingConfig):
    """A draw from softmax(logits / ``temperature``)."""

    temperature: float = setting(1.0, gt=0.0, hint=_HOT)

    def pick(self, logits_BV: Float[Array, "B V"], key: jax.Array | None) -> Int[Array, " B"]:
        return _draw(key, logits_BV.astype(jnp.float32) / self.temperature)


@variant("top_k")
@dataclasses.dataclass(frozen=True)
class TopK(SamplingConfig):
    """A draw among the ``k`` most likely tokens, in proportion to softmax(logits / ``temperature``),
    or uniformly (``uniform``: the notes' definition)."""

    k: int = setting(40, ge=1)
    temperature: float = setting(1.0, gt=0.0, hint=_HOT)
    uniform: bool = False

    def check(self) -> None:
        if self.uniform and self.temperature != 1.0:
            fail(
                "sample.temperature",
                self.temperature,
                "has no effect with uniform=True (the draw is uniform among the k)",
                "leave it 1.0, or set uniform=False",
            )

    def pick(self, logits_BV: Float[Array, "B V"], key: jax.Array | None) -> Int[Array, " B"]:
        filtered_BV = top_k_logits(logits_BV.astype(jnp.float32) / self.temperature, self.k)
        if self.uniform:
            filtered_BV = jnp.where(jnp.isfinite(filtered_BV), 0.0, -jnp.inf)
        return _draw(key, filtered_BV)


@variant("top_p")
@dataclasses.dataclass(frozen=True)
class TopP(SamplingConfig):
    """A draw from the smallest set of most likely tokens whose probability under
    softmax(logits / ``temperature``) reaches ``p`` (nucleus sampling, Holtzman et al. 2020)."""

    p: float = setting(0.9, gt=0.0, le=1.0)
    temperature: float = setting(1.0, gt=0.0, hint=_HOT)

    def pick(self, logits_BV: Float[Array, "B V"], key: jax.Array | None) -> Int[Array, " B"]:
        return _draw(key, top_p_logits(logits_BV.astype(jnp.float32) / self.temperature, self.p))


def pick(logits_BV: Float[Array, "B V"], key: jax.Array | None, cfg: SamplingConfig) -> Int[Array, " B"]:
    """The next tokens under the strategy ``cfg`` (``cfg.pick``)."""
    return cfg.pick(logits_BV, key)
