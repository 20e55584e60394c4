"""Verdicts of the training-heavy notebooks (norm_placement, mixture_of_experts, decoding,
language_model_history) on synthetic per-seed or per-sentence inputs whose answer is known; see
``test_verdicts.py`` for the scheme and ``verdict_cells.py`` for how a cell is run."""

import math
import types

import numpy as np

from tests.notebooks.verdict_cells import FAILS, HOLDS, SEEDS, UNSURE, arm, jitter, notebook_verdicts
from transformer_jax import ablation

# norm_placement: final losses by (placement, depth, warmup, optimizer) and seed; init probes by seed.
SHALLOW, DEEP = 6, 48
CEILING = math.log(65)
NORM_FINAL = {
    ("post", SHALLOW, True, "adam"): 1.50,
    ("post", SHALLOW, False, "adam"): 1.60,
    ("post", DEEP, True, "adam"): 1.45,
    ("post", DEEP, False, "adam"): 2.40,
    ("pre", SHALLOW, True, "adam"): 1.52,
    ("pre", SHALLOW, False, "adam"): 1.53,
    ("pre", DEEP, True, "adam"): 1.40,
    ("pre", DEEP, False, "adam"): 1.42,
    ("deepnorm", SHALLOW, True, "adam"): 1.50,
    ("deepnorm", SHALLOW, False, "adam"): 1.51,
    ("deepnorm", DEEP, True, "adam"): 1.41,
    ("deepnorm", DEEP, False, "adam"): 1.43,
    ("post", SHALLOW, True, "sgd"): 2.50,
    ("pre", SHALLOW, True, "sgd"): 1.90,
}
NORM_CLAIMS = (
    "Post-LN without warmup trains worse, more so with depth; warmup rescues it",
    "Pre-LN trains without warmup",
    "Post-LN (with warmup) can end lower than Pre-LN at shallow depth",
    "Adam is less hurt than SGD by Post-LN",
    "DeepNorm trains deep Post-LN stably",
    "At init, Post-LN gradients shrink towards the input like 2^(-l/2); Pre-LN's are flat",
    "Pre-LN's relative residual change falls with depth",
)


def norm_placement(changes=None, post_rate=0.5, pre_spread=1.5, pre_change=(0.5, 0.1)):
    table = {**NORM_FINAL, **(changes or {})}
    per_seed = {key: jitter(v, i) if v < CEILING else [CEILING] * 3 for i, (key, v) in enumerate(table.items())}
    layers = np.arange(1, DEEP + 1)
    init_grads = {
        "post": [2.0 ** ((post_rate + e) * layers) for e in (0.0, 0.01, -0.01)],
        "pre": [np.linspace(1.0, pre_spread + e, DEEP) for e in (0.0, 0.05, -0.05)],
    }
    rel_change = {"pre": [np.asarray(pre_change) * (1 + e) for e in (0.0, 0.05, -0.05)]}
    v = notebook_verdicts(
        "norm_placement",
        final=lambda key: per_seed[key],
        DEPTHS=(SHALLOW, DEEP),
        SEEDS=SEEDS,
        layers=layers,
        init_grads=init_grads,
        rel_change=rel_change,
        deep=DEEP,
        ceiling=CEILING,
        grid=dict.fromkeys(table),
        fig_init=None,
        fig_grid=None,
    )
    return [v[c] for c in NORM_CLAIMS]


def test_norm_placement_verdicts():
    assert norm_placement() == [HOLDS] * 7
    assert norm_placement({("post", SHALLOW, False, "adam"): 2.60})[0] == FAILS  # gap 1.1 at 6 > 0.95 at 48
    assert norm_placement({("pre", DEEP, False, "adam"): 1.50})[1] == FAILS  # gap 0.10 > the 0.05 margin
    assert norm_placement({("pre", DEEP, False, "adam"): 1.445})[1] == UNSURE  # gap 0.045: the interval crosses 0.05
    assert norm_placement({("post", SHALLOW, True, "adam"): 1.52})[2] == UNSURE  # a tie is no win
    assert norm_placement({("post", SHALLOW, True, "adam"): 1.56})[2] == FAILS
    assert norm_placement({("pre", SHALLOW, True, "sgd"): 2.60})[3] == FAILS
    assert norm_placement({("deepnorm", DEEP, True, "adam"): 1.50})[4] == FAILS  # 0.05 worse than post, like for like
    assert (
        norm_placement({("deepnorm", DEEP, False, "adam"): 2.30})[4] == HOLDS
    )  # still better than post without warmup
    assert norm_placement({("post", DEEP, False, "adam"): math.inf})[0] == HOLDS  # a diverged run counts as ln V
    assert norm_placement(post_rate=0.1)[5] == FAILS and norm_placement(pre_spread=3.0)[5] == FAILS
    assert norm_placement(pre_change=(0.5, 0.3))[6] == FAILS


def test_norm_placement_diverged_deepnorm_does_not_train_stably():
    diverged = {k: math.inf for k in NORM_FINAL if k[1] == DEEP and k[0] in ("post", "deepnorm")}
    assert norm_placement(diverged)[4] == FAILS


# mixture_of_experts: final losses and max/mean expert loads by arm and seed.
MOE_FINAL = {"dense": 1.60, "switch top-1": 1.58, "gshard top-2": 1.55, "deepseekmoe": 1.54}
LOADS = {"gshard top-2": 1.1, "gshard, no balancing": 2.5, "gshard, loss-free bias": 1.2}
MOE_CLAIMS = (
    "At equal active parameters MoE beats dense in the same steps",
    "Fine-grained + shared experts do at least as well as coarse top-2",
    "Without balancing, the router concentrates the load",
    "The loss-free bias evens the load without an auxiliary loss",
)


def moe(final=None, loads=None):
    final = {k: jitter(v, i) for i, (k, v) in enumerate({**MOE_FINAL, **(final or {})}.items())}
    loads = {k: jitter(v, i, 0.01) for i, (k, v) in enumerate({**LOADS, **(loads or {})}.items())}
    v = notebook_verdicts(
        "mixture_of_experts",
        final=final,
        max_over_mean=loads,
        loads={},
        curves={},
        fig_loss=None,
        fig_load=None,
        configs={},
        SEEDS=SEEDS,
    )
    return [v[c] for c in MOE_CLAIMS]


def test_mixture_of_experts_verdicts():
    assert moe() == [HOLDS, HOLDS, HOLDS, HOLDS]
    assert moe({"gshard top-2": 1.60})[0] == UNSURE  # a tie with dense
    assert moe({"gshard top-2": 1.65})[0] == FAILS
    assert moe({"switch top-1": 1.50, "gshard top-2": 1.61})[0] == FAILS  # the arm fixed in advance decides
    assert moe({"deepseekmoe": 1.558})[1] == UNSURE  # 0.008 worse: the interval crosses the 0.01 margin
    assert moe({"deepseekmoe": 1.57})[1] == FAILS
    assert moe(loads={"gshard, no balancing": 1.4})[2] == FAILS  # 1.27x the balanced 1.1, not 1.5x
    assert moe(loads={"gshard, no balancing": 1.65})[2] == UNSURE  # 1.5x, within the noise
    assert moe(loads={"gshard, loss-free bias": 1.6})[3] == FAILS  # below no-balancing but above 1.5
    assert moe(loads={"gshard, no balancing": 1.15})[3] == FAILS  # not below no-balancing


# decoding: per-sentence BLEU counts, lengths and seed agreement; per-token cost by position.
DECODING_CLAIMS = (
    "Beam search beats greedy",
    "Sampling trades quality for diversity",
    "Beam search with a length penalty does not shorten the output",
    "With a KV cache the cost per token grows at most linearly with the position; recomputing grows one power faster",
    "... also with one fixed cache buffer for the whole generation (at most linear)",
)
_RNG = np.random.default_rng(0)
REFS = [" ".join(f"w{i}" for i in _RNG.integers(0, 50, size=10)) for _ in range(150)]


def _strategy(wrong: float, agree: float, words_off: float = 0.0, seed: int = 0) -> dict:
    """Hypotheses that get a share ``wrong`` of each reference's words wrong; ``words_off``: mean change of length."""
    rng = np.random.default_rng(seed)
    hyps = [" ".join(w if rng.random() > wrong else "zz" for w in r.split()) for r in REFS]
    words = np.asarray([10.0 + words_off + rng.choice([-0.5, 0.5]) * (words_off != 0) for _ in REFS])
    return {
        "bleu_stats": ablation.bleu_stats(hyps, REFS),
        "words": words,
        "same with another seed": (rng.random(len(REFS)) < agree).astype(float),
    }


def decoding(items=None, sized_rate=1.0, ratio_rate=1.0, fixed=None):
    base = {
        "greedy": _strategy(0.3, 1.0, seed=1),
        "beam 4": _strategy(0.15, 1.0, seed=2),
        "beam 4, alpha 0": _strategy(0.15, 1.0, -1.0, seed=3),
        "top-k (k=10)": _strategy(0.5, 0.05, seed=4),
        "top-p (p=0.9)": _strategy(0.45, 0.1, seed=5),
    }
    items = {**base, **(items or {})}
    positions = [64, 128, 256, 512, 1024]
    noise = np.exp(np.asarray([0.0, 0.01, -0.01, 0.005, 0.0]))
    sized = {p: 0.003 * p**sized_rate * n for p, n in zip(positions, noise)}
    recompute = {p: sized[p] * 0.01 * p**ratio_rate * n for p, n in zip(positions, noise[::-1])}
    times = {
        "cached_sized_ms": sized,
        "cached_fixed_ms": fixed or dict.fromkeys(positions, 3.0),
        "recompute_ms": recompute,
    }
    results = {n: {"bleu": ablation.bleu_of_stats(it["bleu_stats"]), "distinct-2": 0.5} for n, it in items.items()}
    v = notebook_verdicts(
        "decoding",
        items=items,
        results=results,
        ref_words=np.full(len(REFS), 10.0),
        positions=positions,
        times=times,
        examples={},
        fig_strat=None,
        fig_cache=None,
        run=types.SimpleNamespace(cfg={}),
    )
    return [v[c] for c in DECODING_CLAIMS]


def test_decoding_strategy_verdicts():
    assert decoding() == [HOLDS] * 5
    assert decoding({"beam 4": _strategy(0.3, 1.0, seed=1)})[0] == UNSURE  # the same output as greedy
    assert decoding({"beam 4": _strategy(0.45, 1.0, seed=2)})[0] == FAILS
    assert decoding({"top-p (p=0.9)": _strategy(0.15, 0.1, seed=5)})[1] == FAILS  # a sampler better than greedy
    assert decoding({"top-k (k=10)": _strategy(0.5, 1.0, seed=4)})[1] == UNSURE  # not random after all
    assert decoding({"beam 4": _strategy(0.15, 1.0, -0.05, seed=2)})[2] == HOLDS  # 0.05 shorter: within 0.5
    assert decoding({"beam 4": _strategy(0.15, 1.0, -1.0, seed=2)})[2] == FAILS


def test_decoding_kv_cache_verdicts_use_the_slopes():
    assert decoding(sized_rate=1.5)[3] == FAILS  # cached cost grows faster than linearly
    assert decoding(ratio_rate=0.3)[3] == FAILS  # recompute only 0.3 of a power faster
    assert decoding(fixed={64: 1.0, 128: 2.1, 256: 3.9, 512: 8.2, 1024: 16.0})[4] == HOLDS  # linear is allowed
    assert decoding(fixed={64: 1.0, 128: 4.1, 256: 15.9, 512: 64.2, 1024: 256.0})[4] == FAILS
    # a per-token time that timing noise made <= 0 cannot be fitted: inconclusive, not an error
    assert decoding(fixed={64: -0.1, 128: 2.1, 256: 3.9, 512: 8.2, 1024: 16.0})[4] == UNSURE


# language_model_history: perplexities and speeds of the five models, by seed.
WIN, LSTM, TF = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
LM_ROWS = {
    "2-gram": {"val perplexity": 9.0, "tokens/s": None, "parameters": 0},
    "3-gram": {"val perplexity": 8.0, "tokens/s": None, "parameters": 0},
    WIN: {"val perplexity": 7.0, "tokens/s": 9000.0, "parameters": 100_000},
    LSTM: {"val perplexity": 6.0, "tokens/s": 1000.0, "parameters": 200_000},
    TF: {"val perplexity": 5.0, "tokens/s": 5000.0, "parameters": 200_000},
}
LM_CLAIMS = (
    "A neural fixed-window LM beats the n-gram",
    "An RNN beats the fixed-window LM",
    "The Transformer beats the RNN at about the same parameters and steps",
    "The Transformer trains faster than the RNN",
)


def lm_history(changes=None):
    arms = {}
    for i, (name, row) in enumerate(LM_ROWS.items()):
        row = {**row, **(changes or {}).get(name, {})}
        counted = "gram" in name  # a count: the same every seed
        ppl = [row["val perplexity"]] * 3 if counted else jitter(row["val perplexity"], i, 0.02)
        tps = [None] * 3 if row["tokens/s"] is None else jitter(row["tokens/s"], i, 20.0)
        arms[name] = arm(**{"val perplexity": ppl, "tokens/s": tps, "parameters": [row["parameters"]] * 3})
    v = notebook_verdicts("language_model_history", arms=arms, curves={}, fig=None, configs={}, SEEDS=SEEDS)
    return [v[c] for c in LM_CLAIMS]


def test_language_model_history_verdicts():
    assert lm_history() == [HOLDS, HOLDS, HOLDS, HOLDS]
    # the window must beat the *best* n-gram: a 2-gram below it turns the first claim
    assert lm_history({"2-gram": {"val perplexity": 6.9}})[0] == FAILS
    assert lm_history({TF: {"val perplexity": 6.1}}) == [HOLDS, HOLDS, FAILS, HOLDS]
    assert lm_history({LSTM: {"val perplexity": 7.0}})[1] == UNSURE  # a tie is no win
    assert lm_history({TF: {"tokens/s": 900.0}})[3] == FAILS


def test_language_model_history_without_a_speed_is_inconclusive():
    assert lm_history({LSTM: {"tokens/s": None}})[3] == UNSURE
