"""The decoding notebook's measurements of one trained translation model (`strategy_measures`),
kept in the model's run summary (`store.run_arm`'s ``measure``) so that a later sitting reads them
back instead of decoding again, and the comparisons its verdicts read (`paired_measured`).

Per model: greedy and beam search over the validation sources (BLEU against the references, mean
words, distinct-1 and -2 pooled over the outputs, and the *corpus* self-BLEU: each output against
the other outputs of its chunk of `CHUNK` sources, how alike the outputs for different sources
are); each sampler drawn ``samples`` times over the first ``subset`` sources (mean BLEU and
distinct-2 of a draw, and the self-BLEU of the draws of one source against each other, averaged
over the sources: how much its outputs for one source vary).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.stats import Comparison, loglog_slope, paired
from transformer_jax.decode import SamplingConfig
from transformer_jax.eval import (
    Beam,
    Sampled,
    TranslateConfig,
    chunks,
    corpus_bleu,
    distinct_n,
    mean_self_bleu,
    reference_pairs,
    translate_ids,
)

CHUNK = 50
"""Sources per chunk of the corpus self-BLEU (each output against the 49 others of its chunk)."""


def _words(texts: Sequence[str]) -> float:
    return float(np.mean([len(t.split()) for t in texts])) if texts else math.nan


def _deterministic(texts: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    return {
        "bleu": corpus_bleu(texts, refs)["bleu"],
        "words": _words(texts),
        "distinct-1": distinct_n(texts, 1),
        "distinct-2": distinct_n(texts, 2),
        "corpus self-bleu": mean_self_bleu(chunks(texts, CHUNK)),
    }


def strategy_measures(
    workdir: str,
    *,
    beam: Beam,
    samplers: Mapping[str, SamplingConfig],
    samples: int,
    subset: int | None,
    sources: int | None = None,
    words: bool = True,
    examples: int = 2,
) -> dict[str, Any]:
    """The numbers above for the last checkpoint of the translation run in ``workdir``, on its
    first ``sources`` validation pairs (None: all): ``{"greedy" | "beam": {...}, "samplers": {name:
    {...}}, "greedy on the subset": {...}, "examples": ..., "sources": n}``. ``words``: outputs as
    the tokenizer's text (False: its characters as the words, outputs and references alike, for a
    synthetic task whose symbols are no words)."""
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(workdir_config(workdir), workdir)
    run.checkpoints.close()
    params = (run.state.params, run.state.model_state)
    srcs, refs = reference_pairs(run.data, "val", sources)
    spell = (lambda t: t) if words else (lambda t: " ".join(t.replace(" ", "")))
    refs = [spell(r) for r in refs]
    base = TranslateConfig(max_src_len=run.cfg.data.max_src_len, max_new_tokens=run.cfg.data.seq_len)

    def texts(search, n: int | None = None) -> list[str]:
        ids = translate_ids(run.graphdef, params, srcs[:n], dataclasses.replace(base, search=search))
        return [spell(run.data.tokenizer.decode(x).replace("\n", " ")) for x in ids]

    greedy, best = texts(Sampled()), texts(beam)
    m = len(srcs) if subset is None else min(subset, len(srcs))
    out: dict[str, Any] = {
        "sources": len(srcs),
        "subset": m,
        "greedy": _deterministic(greedy, refs),
        "beam": _deterministic(best, refs),
        "greedy on the subset": {"bleu": corpus_bleu(greedy[:m], refs[:m])["bleu"], "self-bleu": 100.0},
        "samplers": {},
        "examples": {"reference": refs[:examples], "greedy": greedy[:examples], "beam": best[:examples]},
    }
    for name, sampling in samplers.items():
        draws = [texts(Sampled(sampling, seed=j), m) for j in range(samples)]
        out["samplers"][name] = {
            "bleu": float(np.mean([corpus_bleu(d, refs[:m])["bleu"] for d in draws])),
            "distinct-2": float(np.mean([distinct_n(d, 2) for d in draws])),
            "self-bleu": mean_self_bleu([list(per_source) for per_source in zip(*draws)]),
            "words": float(np.mean([_words(d) for d in draws])),
        }
        out["examples"][name] = draws[0][:examples]
    return out


def paired_measured(a: Sequence[float], b: Sequence[float], **claim: Any) -> Comparison:
    """`stats.paired` of a and b (per model), or a part left unmeasured (inconclusive) where a
    measure is undefined for some model (NaN: e.g. distinct-2 of outputs of at most one word)."""
    if not np.all(np.isfinite(np.asarray([*a, *b], dtype=float))):
        return Comparison.unmeasured(reason="a measure undefined for some model (NaN)", **claim)
    return paired(a, b, **claim)


def loglog_or_unmeasured(x: Sequence[float], y: Any, **claim: Any) -> Comparison:
    """`stats.loglog_slope` of y against x, or a part left unmeasured (inconclusive) where some y
    is not positive (a per-token time that timing noise made <= 0, possible at SMOKE sizes)."""
    if np.min(np.asarray(y, dtype=float)) <= 0:
        return Comparison.unmeasured(reason="a value <= 0 (timing noise)", **claim)
    return loglog_slope(x, y, **claim)


def nan_for_none(record: Any) -> Any:
    """``record`` (a run summary's ``measured``) with None, how JSON keeps NaN, back as NaN."""
    if isinstance(record, dict):
        return {k: nan_for_none(v) for k, v in record.items()}
    if isinstance(record, list):
        return [nan_for_none(v) for v in record]
    return math.nan if record is None else record
