"""Verdicts of the decoding notebook (its verdict cell run on synthetic per-model numbers): each
row comes out either way, and the number of models is the one its power calculation asks."""

import itertools
import math

import numpy as np

from tests.notebooks.verdict_cells import FAILS, HOLDS, UNSURE, notebook_claims, notebook_verdicts
from transformer_jax import ablation

# decoding: per-model numbers of greedy, beam, the references and the uniform top-k samplers; per-token cost by
# position.
DECODING_CLAIMS = (
    "Beam search beats greedy",
    "Beam search's answers are more run-of-the-mill than human translations",
    "The larger k, the more top-k sampling's outputs for one source vary",
    "With a KV cache the cost per token grows at most linearly with the position; recomputing grows one power faster",
    "... in the compiled programs: FLOPs and bytes per step",
)
K_UNIFORM = (2, 3, 5)
DECODING_SEEDS = tuple(range(6))  # BEAM_POWER.n(): test_decoding_models_are_as_many_as_the_power_calculation_asks
GREEDY = {"bleu": 30.0, "words": 11.5, "distinct-2": 0.40, "corpus self-bleu": 8.0}
BEAM = {"bleu": 31.0, "words": 11.0, "distinct-2": 0.35, "corpus self-bleu": 10.0}
REFERENCE = {"words": 12.0, "distinct-2": 0.55, "corpus self-bleu": 7.0}  # the same for every model
UNIFORM = {  # uniform top-k over the first sources, by k
    2: {"self-bleu": 40.0, "distinct-2": 0.50, "corpus self-bleu": 6.0, "words": 11.8},
    3: {"self-bleu": 30.0, "distinct-2": 0.55, "corpus self-bleu": 5.0, "words": 12.0},
    5: {"self-bleu": 20.0, "distinct-2": 0.60, "corpus self-bleu": 4.0, "words": 12.5},
}


def _decoder(row: dict, k: int) -> list[dict]:
    """One record per model: each value plus a spread that differs by ``k`` (models vary differently)."""
    wobble = np.roll([0.0, 1.0, -1.0, 0.5, -0.5, 0.25], k)
    return [{key: v + (0.001 * abs(v) + 0.001) * w for key, v in row.items()} for w in wobble]


def decoding(
    beam=None,
    reference=None,
    greedy=None,
    uniform=None,
    sized_rate=1.0,
    ratio_rate=1.0,
    cached_flops_rate=0.5,
    sized_offset=0.0,
):
    greedy = _decoder({**GREEDY, **(greedy or {})}, 0)
    best = _decoder({**BEAM, **(beam or {})}, 1)
    per_k = {k: _decoder({**row, **(uniform or {}).get(k, {})}, 2 + i) for i, (k, row) in enumerate(UNIFORM.items())}
    measures = [
        {
            "greedy": greedy[s],
            "beam": best[s],
            "beam on the subset": best[s],
            "reference": {**REFERENCE, **(reference or {})},
            "samplers": {f"top-{k} uniform": per_k[k][s] for k in K_UNIFORM},
            "subset": 200,
            "examples": {},
        }
        for s in range(len(DECODING_SEEDS))
    ]
    positions = [1024, 1448, 2048, 2896, 4096]
    noise = np.exp(np.asarray([0.0, 0.01, -0.01, 0.005, 0.0]))
    sized = {p: 0.003 * p**sized_rate * n for p, n in zip(positions, noise)}
    recompute = {p: sized[p] * 0.01 * p**ratio_rate * n for p, n in zip(positions, noise[::-1])}
    cost_positions = [256, 512, 1024, 2048, 4096]
    cached = {p: {"flops": 1e6 * p**cached_flops_rate, "bytes accessed": 1e5 * p**0.9} for p in cost_positions}
    step = {
        "cached": cached,
        "recompute": {p: {k: v * p * (1 + 0.01 * (p % 3)) for k, v in cached[p].items()} for p in cost_positions},
    }
    sized[positions[0]] += sized_offset
    v = notebook_verdicts(
        "decoding",
        measures=measures,
        K_UNIFORM=K_UNIFORM,
        itertools=itertools,
        positions=positions,
        times={"cached_sized_ms": sized, "cached_fixed_ms": dict.fromkeys(positions, 3.0), "recompute_ms": recompute},
        cost_positions=cost_positions,
        costs=step,
        kept={"machine": {"host": "h", "cpus": 2}},
        strategies={},
        SEEDS=DECODING_SEEDS,
        BEAM_POWER=ablation.Power(sd=0.605, effect=1.0, pilot="the notebook's, as registered"),
        fig_strat=None,
        fig_cache=None,
        mt_cfg={},
        lm_cfg={},
    )
    return [v[c] for c in DECODING_CLAIMS]


def test_decoding_models_are_as_many_as_the_power_calculation_asks():
    claims = {c.name: c for c in notebook_claims("decoding")}
    beam = claims["Beam search beats greedy"]
    assert beam.n == beam.power.n() == len(DECODING_SEEDS) and beam.underpowered() is None
    assert {c.n for c in claims.values() if "sampling" in c.name or "greedy" in c.name} == {beam.n}


def test_decoding_strategy_verdicts():
    assert decoding() == [HOLDS] * 5
    assert decoding(beam={"bleu": 30.0})[0] == UNSURE  # beam no better than greedy
    assert decoding(beam={"bleu": 29.0})[0] == FAILS


def test_decoding_beam_is_judged_more_run_of_the_mill_than_the_references_not_than_the_samplers():
    assert decoding(beam={"distinct-2": 0.55})[1] == UNSURE  # as many distinct bigrams as the references
    assert decoding(beam={"distinct-2": 0.60})[1] == FAILS  # more varied phrasing than people's
    assert decoding(beam={"corpus self-bleu": 7.0})[1] == UNSURE  # answers to different sources as alike as theirs
    assert decoding(reference={"corpus self-bleu": 12.0})[1] == FAILS  # people's answers more alike than beam's
    assert decoding(beam={"distinct-2": math.nan})[1] == UNSURE  # undefined (outputs of <= 1 word): unmeasured
    # greedy and the samplers do not enter: beam more varied than either changes nothing
    assert decoding(greedy={"distinct-2": 0.30, "corpus self-bleu": 12.0})[1] == HOLDS
    assert decoding(uniform={k: {"distinct-2": 0.20, "corpus self-bleu": 30.0} for k in K_UNIFORM})[1] == HOLDS


def test_decoding_k_check_flips_with_the_draws_variety():
    assert decoding(uniform={5: {"self-bleu": 30.0}})[2] == UNSURE  # k=5 varies no more than k=3
    assert decoding(uniform={3: {"self-bleu": 45.0}})[2] == FAILS  # k=3 varies less than k=2


def test_decoding_kv_cache_verdicts_use_the_slopes():
    assert decoding(sized_rate=1.5)[3] == FAILS  # cached cost grows faster than linearly
    assert decoding(ratio_rate=0.3)[3] == FAILS  # recompute only 0.3 of a power faster
    assert decoding(sized_rate=-0.0001)[3] == HOLDS  # flat is at most linear
    assert decoding(cached_flops_rate=2.0)[4] == FAILS  # the compiled cached step quadratic


def test_decoding_kv_cache_time_that_noise_made_non_positive_is_unmeasured():
    assert decoding(sized_offset=-10.0)[3] == UNSURE  # a per-token time <= 0 cannot be fitted: inconclusive
