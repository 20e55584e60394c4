"""Batched, jitted log-likelihood of token continuations: the primitive of multiple-choice tasks
(lm-evaluation-harness' ``loglikelihood``) and of corpus perplexity (its ``loglikelihood_rolling``).

A request is a token sequence and the number of its last tokens to score. Requests are sorted by
length, batched ``batch_size`` at a time and right-padded to a bucket length (powers of two up to
the model's ``max_len``), so the scoring program compiles once per bucket, not once per example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Float, Int
from tqdm.auto import tqdm

from transformer_jax.core import compiler

MIN_BUCKET = 16


@dataclass(frozen=True)
class Request:
    """``tokens``: the whole sequence (context + continuation); its last ``n_scored`` tokens are scored."""

    tokens: tuple[int, ...]
    n_scored: int


def bucket_length(n: int, max_len: int) -> int:
    """The smallest power of two >= ``n`` (at least ``MIN_BUCKET``), capped at ``max_len``."""
    return min(max(MIN_BUCKET, 1 << max(n - 1, 0).bit_length()), max_len)


def _score_fn(graphdef) -> Callable:
    def score(
        state, tokens_BT: Int[Array, "B T"], targets_BT: Int[Array, "B T"], mask_BT: Bool[Array, "B T"]
    ) -> tuple[Float[Array, " B"], Bool[Array, " B"]]:
        """Sum of log p(target) over the masked positions, and whether every masked target is the argmax."""
        logits_BTV, _ = nnx.merge(graphdef, state)(tokens_BT)
        logp_BTV = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
        logp_BT = jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1)[..., 0]
        greedy_BT = jnp.argmax(logits_BTV, axis=-1) == targets_BT
        return jnp.where(mask_BT, logp_BT, 0.0).sum(-1), jnp.all(greedy_BT | ~mask_BT, axis=-1)

    return score


class Scorer:
    """Log-likelihoods of requests under one decoder-only model (a ``DecoderLM``: ``model(tokens)``
    returns ``(logits, aux)``). A sequence longer than ``max_len + 1`` keeps its last tokens."""

    def __init__(self, model: nnx.Module, *, max_len: int, batch_size: int = 16, progress: bool = True):
        if batch_size < 1:
            raise ValueError(f"--batch-size={batch_size}: must be positive")
        self.graphdef, self.state = nnx.split(model)
        self.max_len, self.batch_size, self.progress = max_len, batch_size, progress
        self._score = compiler.jit(_score_fn(self.graphdef))
        self.buckets: set[int] = set()

    def _batch(self, requests: Sequence[Request]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cut = [r.tokens[-(self.max_len + 1) :] for r in requests]
        T = bucket_length(max(len(t) - 1 for t in cut), self.max_len)
        self.buckets.add(T)
        tokens = np.zeros((self.batch_size, T), np.int32)
        targets = np.zeros((self.batch_size, T), np.int32)
        mask = np.zeros((self.batch_size, T), bool)
        for i, (t, r) in enumerate(zip(cut, requests, strict=True)):
            n = len(t) - 1
            tokens[i, :n], targets[i, :n] = t[:-1], t[1:]
            mask[i, max(n - r.n_scored, 0) : n] = True
        return tokens, targets, mask

    def score(self, requests: Sequence[Request], desc: str = "loglikelihood") -> list[tuple[float, bool]]:
        """``(sum of log p over the scored tokens, all scored tokens greedy)`` per request, in order."""
        for r in requests:
            if r.n_scored < 1 or len(r.tokens) <= r.n_scored:
                raise ValueError(f"a request scores {r.n_scored} of {len(r.tokens)} tokens; it needs a context token")
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i].tokens))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        starts = range(0, len(order), self.batch_size)
        for s in tqdm(starts, desc=desc, disable=not self.progress, unit="batch", leave=False):
            idx = order[s : s + self.batch_size]
            logp, greedy = jax.device_get(self._score(self.state, *self._batch([requests[i] for i in idx])))
            for j, i in enumerate(idx):
                out[i] = (float(logp[j]), bool(greedy[j]))
        return out


def encode_pair(encode: Callable[[str], list[int]], context: str, continuation: str) -> Request:
    """lm-evaluation-harness' ``_encode_pair`` for causal models: the context's trailing spaces move
    to the continuation, ``context + continuation`` is encoded whole and the continuation's tokens
    are those after the context's own encoding."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = encode(context + continuation)
    n_context = len(encode(context))
    return Request(tuple(whole), len(whole) - n_context)


def rolling_requests(ids: Sequence[int], prefix_id: int, window: int) -> list[Request]:
    """lm-evaluation-harness' ``loglikelihood_rolling`` (context length 1): windows that score every
    token of ``ids`` once, ``window`` at a time, each with up to ``window`` tokens of input
    (``prefix_id`` before the first token; a last, shorter window keeps the tokens before it)."""
    full = [prefix_id, *ids]
    out = []
    for start in range(0, len(ids), window):
        end = min(start + window, len(ids))
        out.append(Request(tuple(full[max(0, end - window) : end + 1]), end - start))
    return out


def context_encoder(tokenizer) -> Callable[[str], list[int]]:
    """How a context is encoded for scoring: a Hugging Face tokenizer adds its special tokens (e.g.
    Llama's BOS), as the harness' ``hf`` model does by default; our tokenizers get a BOS first, as
    the training rows have."""
    from transformer_jax.data import HFTokenizer

    if isinstance(tokenizer, HFTokenizer):
        return lambda text: tokenizer.encode(text, add_special_tokens=True)
    return lambda text: [tokenizer.bos_id, *tokenizer.encode(text)]
