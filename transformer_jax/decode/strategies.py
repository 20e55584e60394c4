"""Next-token selection rules, chosen by name: greedy, temperature sampling, top-k, top-p.

Each rule is ``pick(logits_BV, key, cfg) -> tokens_B`` (pure; batched; deterministic for a key).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from transformer_jax.core.configlib import Config, setting
from transformer_jax.core.registry import Registry

STRATEGIES: Registry = Registry("decoding strategy")


@dataclasses.dataclass(frozen=True)
class SamplingConfig(Config):
    """``strategy``: greedy | sample | top_k | top_p (beam search lives in ``decode.beam``).

    ``temperature`` divides the logits before sampling; ``top_k`` keeps the k most likely tokens
    (``uniform_top_k``: choose among them uniformly, else in proportion to their probability);
    ``top_p`` keeps the smallest set whose probability reaches p (Holtzman et al. 2020).
    """

    strategy: str = setting("greedy", choice=STRATEGIES)
    temperature: float = setting(1.0, gt=0.0, hint="temperature 0 is greedy decoding: use strategy=greedy")
    top_k: int = setting(40, ge=1)
    top_p: float = setting(0.9, gt=0.0, le=1.0)
    uniform_top_k: bool = False

    PATH: ClassVar[str] = "sample"


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


@STRATEGIES.register("greedy")
def greedy(logits_BV, key, cfg: SamplingConfig) -> Int[Array, " B"]:
    del key, cfg
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)


@STRATEGIES.register("sample")
def sample(logits_BV, key, cfg: SamplingConfig) -> Int[Array, " B"]:
    return jax.random.categorical(key, logits_BV.astype(jnp.float32) / cfg.temperature, axis=-1).astype(jnp.int32)


@STRATEGIES.register("top_k")
def top_k(logits_BV, key, cfg: SamplingConfig) -> Int[Array, " B"]:
    filtered = top_k_logits(logits_BV.astype(jnp.float32) / cfg.temperature, cfg.top_k)
    if cfg.uniform_top_k:
        filtered = jnp.where(jnp.isfinite(filtered), 0.0, -jnp.inf)
    return jax.random.categorical(key, filtered, axis=-1).astype(jnp.int32)


@STRATEGIES.register("top_p")
def top_p(logits_BV, key, cfg: SamplingConfig) -> Int[Array, " B"]:
    filtered = top_p_logits(logits_BV.astype(jnp.float32) / cfg.temperature, cfg.top_p)
    return jax.random.categorical(key, filtered, axis=-1).astype(jnp.int32)


def pick(logits_BV, key, cfg: SamplingConfig) -> Int[Array, " B"]:
    """The next tokens under ``cfg.strategy``."""
    return STRATEGIES.get(cfg.strategy)(logits_BV, key, cfg)
