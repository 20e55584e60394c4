"""The decoding notebook's measurements of one trained translation model (`strategy_measures`),
kept in the model's run summary (`store.run_arm`'s ``measure``) so that a later sitting reads them
back instead of decoding again, and the comparisons its verdicts read (`paired_measured`).

Per model: greedy and beam search over the validation sources (BLEU against the references, mean
words, distinct-1 and -2 pooled over the outputs, and the *corpus* self-BLEU: each output against
the other outputs of its chunk of `CHUNK` sources, how alike the outputs for different sources
are), and the same of their outputs on the first ``subset`` sources; each sampler drawn
``samples`` times over those sources (means over the draws of BLEU, words, distinct-2 and the
corpus self-BLEU of a draw, so that a sampler and a search are compared on the same sources, and
the self-BLEU of the draws of one source against each other, averaged over the sources: how much
its outputs for one source vary); the same numbers of the human references (over all sources and
the first ``subset``), against which beam search's conservatism is judged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.claims import Power
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


def _variety(texts: Sequence[str]) -> dict[str, float]:
    return {
        "words": _words(texts),
        "distinct-1": distinct_n(texts, 1),
        "distinct-2": distinct_n(texts, 2),
        "corpus self-bleu": corpus_self_bleu(texts),
    }


def _deterministic(texts: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    return {"bleu": corpus_bleu(texts, refs)["bleu"], **_variety(texts)}


def corpus_self_bleu(texts: Sequence[str]) -> float:
    """How alike one decoder's outputs for different sources are: each output's sentence BLEU
    (0-100) against the other outputs of its chunk of `CHUNK` consecutive sources, averaged; NaN
    when no chunk holds two outputs or no output holds a word (empty outputs share no n-gram, which
    would read as answers unlike each other)."""
    groups = chunks(texts, CHUNK)
    return mean_self_bleu(groups) if groups and any(t.split() for t in texts) else math.nan


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
    first ``sources`` validation pairs (None: all): ``{"greedy" | "beam" | "greedy on the subset" |
    "beam on the subset" | "reference" | "reference on the subset": {...}, "samplers": {name:
    {...}}, "examples": ..., "sources": n, "subset": m}`` (the references' numbers: no BLEU). ``words``: outputs as
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
        "greedy on the subset": {**_deterministic(greedy[:m], refs[:m]), "self-bleu": 100.0},
        "beam on the subset": {**_deterministic(best[:m], refs[:m]), "self-bleu": 100.0},
        "reference": _variety(refs),
        "reference on the subset": _variety(refs[:m]),
        "samplers": {},
        "examples": {"reference": refs[:examples], "greedy": greedy[:examples], "beam": best[:examples]},
    }
    for name, sampling in samplers.items():
        draws = [texts(Sampled(sampling, seed=j), m) for j in range(samples)]
        out["samplers"][name] = {
            "bleu": float(np.mean([corpus_bleu(d, refs[:m])["bleu"] for d in draws])),
            "distinct-2": float(np.mean([distinct_n(d, 2) for d in draws])),
            "self-bleu": mean_self_bleu([list(per_source) for per_source in zip(*draws)]),
            "corpus self-bleu": float(np.mean([corpus_self_bleu(d) for d in draws])),
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


def kv_cache_parts(
    positions: Sequence[int],
    times: Mapping[str, Mapping[int, float]],
    cost_positions: Sequence[int],
    costs: Mapping[str, Mapping[int, Mapping[str, float]]],
) -> tuple[list[Comparison], list[Comparison]]:
    """The KV-cache comparisons (`loglog_or_unmeasured`): from the per-token ``times`` (ms by
    position, ``"cached_sized_ms"`` and ``"recompute_ms"``), the cached slope (at most 1 + 0.1) and
    the slope of recompute / cached (1 +- 0.25); from the compiled steps' ``costs`` (``"cached"`` |
    ``"recompute"`` -> position -> ``"flops"`` | ``"bytes accessed"``), the cached step's FLOPs and
    bytes slopes, then those of recompute / cached."""
    sized, recompute = (np.asarray([times[k][p] for p in positions]) for k in ("cached_sized_ms", "recompute_ms"))
    linear, faster = {"reference": 1.0, "margin": 0.1}, {"reference": 1.0, "margin": 0.25}
    timed = [
        loglog_or_unmeasured(positions, sized, expect="not greater", **linear),
        loglog_or_unmeasured(positions, recompute / sized, expect="equal", **faster),
    ]
    at = {
        kind: {key: np.asarray([costs[kind][p][key] for p in cost_positions]) for key in ("flops", "bytes accessed")}
        for kind in ("cached", "recompute")
    }
    compiled = [loglog_or_unmeasured(cost_positions, y, expect="not greater", **linear) for y in at["cached"].values()]
    compiled += [
        loglog_or_unmeasured(cost_positions, at["recompute"][k] / at["cached"][k], expect="equal", **faster)
        for k in ("flops", "bytes accessed")
    ]
    return timed, compiled


SAMPLED = ("bleu", "self-bleu", "distinct-2", "corpus self-bleu", "words")
"""The numbers of a sampler (and of a search on the same first sources) in `strategy_table`."""


def strategy_table(measures: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Means over the models (``measures``: `strategy_measures` of each) by decoder: ``"greedy"``,
    ``"beam 4"`` and ``"references"`` over all the sources, then each sampler and ``"greedy, first
    sources"``, ``"beam 4, first sources"``, ``"references, first sources"`` over the first
    ``subset`` sources (`SAMPLED`: the searches' self-BLEU of their draws is 100, they draw nothing;
    the references have no BLEU and no draws)."""
    mean = lambda *path: {k: float(np.mean([_at(m, *path)[k] for m in measures])) for k in _at(measures[0], *path)}
    searches = (("greedy", "greedy"), ("beam 4", "beam"), ("references", "reference"))
    subset = (
        ("greedy, first sources", "greedy on the subset"),
        ("beam 4, first sources", "beam on the subset"),
        ("references, first sources", "reference on the subset"),
    )
    return {
        **{name: mean(key) for name, key in searches},
        **{name: mean("samplers", name) for name in measures[0]["samplers"]},
        **{name: {k: v for k, v in mean(key).items() if k in SAMPLED} for name, key in subset},
    }


def _at(record: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    for key in path:
        record = record[key]
    return record


def strategy_figure(table: Mapping[str, Mapping[str, float]]) -> Any:
    """Quality (BLEU) against variety (100 - self-BLEU of the draws per source) of the decoders of
    `strategy_table` that drew (or whose draws are 100: the searches)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, row in table.items():
        if "self-bleu" in row and "bleu" in row:
            ax.plot(100 - row["self-bleu"], row["bleu"], "o")
            ax.annotate(
                name, (100 - row["self-bleu"], row["bleu"]), fontsize=8, xytext=(3, 3), textcoords="offset points"
            )
    ax.set(
        xlabel="100 - self-BLEU of the draws per source (variety)",
        ylabel="BLEU (first sources)",
        title="Quality vs variety",
    )
    return fig


def kv_cache_figure(
    positions: Sequence[int],
    times: Mapping[str, Mapping[int, float]],
    labels: Mapping[str, str],
    cost_positions: Sequence[int],
    costs: Mapping[str, Mapping[int, Mapping[str, float]]],
) -> Any:
    """Left: ms per new token by position (``times[name][p]``, one line per ``labels``); right: the
    compiled step's FLOPs and bytes by position (``costs``, as `kv_cache_parts` reads them)."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4))
    for name, label in labels.items():
        ax.loglog(positions, [times[name][p] for p in positions], "o-", label=label)
    ax.set(xlabel="position p", ylabel="ms per new token", title="Time of one decoding step")
    for kind in ("cached", "recompute"):
        for key, style in (("flops", "o-"), ("bytes accessed", "s--")):
            bx.loglog(cost_positions, [costs[kind][p][key] for p in cost_positions], style, label=f"{kind}, {key}")
    bx.set(xlabel="position p", title="Compiled step: FLOPs and bytes")
    for a in (ax, bx):
        a.legend(fontsize=8)
    return fig


def observed_power(a: Sequence[float], b: Sequence[float], power: Power) -> str:
    """The sd of the paired differences a - b and the power ``power`` would have at that sd and their
    n, as text for a measured row (a registered sd that was only assumed, checked against the run);
    empty under two finite pairs or no spread."""
    d = np.asarray(a, float) - np.asarray(b, float)
    d = d[np.isfinite(d)]
    if len(d) < 2 or not d.std(ddof=1) > 0:
        return ""
    sd = float(d.std(ddof=1))
    at = dataclasses.replace(power, sd=sd)
    achieved = at.achieved(len(d))
    return f"; sd of the difference {sd:.3f} (registered {power.sd:g}): power {achieved:.2f} for {power.effect:g}"
