"""Perplexity and bits per byte of a model on text files, local or ``gs://`` (each file one document)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from transformer_jax.core.paths import user_path
from transformer_jax.eval.loglikelihood import Scorer, rolling_requests


def corpus_metrics(scorer: Scorer, tokenizer, paths: Sequence[str], window: int | None = None) -> dict:
    """Every token of every file scored once (``rolling_requests``, windows of ``window`` tokens,
    default the model's ``max_len``), after the tokenizer's BOS. ``perplexity`` = exp(NLL / tokens),
    ``bits_per_byte`` = NLL / (ln 2 * UTF-8 bytes), ``byte_perplexity`` = exp(NLL / bytes)."""
    requests, n_bytes, n_tokens = [], 0, 0
    for path in paths:
        text = user_path(path, "--corpus").read_text(encoding="utf-8")
        ids = tokenizer.encode(text)
        if not ids:
            raise ValueError(f"--corpus {path}: no tokens (an empty file?)")
        requests += rolling_requests(ids, tokenizer.bos_id, window or scorer.max_len)
        n_bytes, n_tokens = n_bytes + len(text.encode("utf-8")), n_tokens + len(ids)
    nll = -sum(ll for ll, _ in scorer.score(requests, desc="corpus"))
    return {
        "files": len(paths),
        "tokens": n_tokens,
        "bytes": n_bytes,
        "loss": nll / n_tokens,
        "perplexity": math.exp(min(nll / n_tokens, 700.0)),
        "bits_per_byte": nll / (math.log(2) * n_bytes),
        "byte_perplexity": math.exp(min(nll / n_bytes, 700.0)),
    }
