"""Verdicts of the training-heavy notebooks (norm_placement, norm_training, mixture_of_experts, decoding,
language_model_history) on synthetic per-seed or per-sentence inputs whose answer is known; see
``test_verdicts.py`` for the scheme and ``verdict_cells.py`` for how a cell is run."""

import math
import types

import numpy as np

from tests.notebooks.verdict_cells import FAILS, HOLDS, SEEDS, UNSURE, arm, jitter, notebook_verdicts
from transformer_jax import ablation

# norm_placement: final losses by arm and seed; init probes and trained residual changes by seed.
SHALLOW, DEEP = 6, 48
LRS = (1e-3, 3e-3)
CEILING = math.log(65)
WARM_LOSS = {  # (placement, depth, warmup): loss, at both fixed LRs
    ("post", SHALLOW, True): 1.50,
    ("post", SHALLOW, False): 1.60,
    ("post", DEEP, True): 1.45,
    ("post", DEEP, False): 2.40,
    ("pre", SHALLOW, True): 1.52,
    ("pre", SHALLOW, False): 1.53,
    ("pre", DEEP, True): 1.40,
    ("pre", DEEP, False): 1.42,
}
UNIGRAM = {"dev": 3.3, "val": 3.3}  # the loss of character frequencies alone: the failure line is 2.8
NORM_FRESH = (3, 4, 5, 6, 7, 8)
LETS = {"warmup": 2.20, "no warmup": 3.32}  # deep Post-LN at the scan's pick, on the fresh seeds
VERSUS = {"post": 1.48, "pre": 1.52}  # 6 layers, each at its best LR and warmup
OPTIMIZERS = {("post", "adam"): 2.20, ("post", "sgd"): 2.90, ("pre", "adam"): 2.10, ("pre", "sgd"): 2.30}
NORM_CLAIMS = (
    "Warmup is what lets deep Post-LN train",
    "Pre-LN trains without warmup",
    "Post-LN ends lower than Pre-LN at 6 layers, each at its best LR and warmup",
    "Adam is less hurt than SGD by deep Post-LN's vanishing identity path",
    "DeepNorm rescues deep Post-LN (same warmup)",
    "Pre-LN's relative residual change falls with depth (trained)",
)
INIT_CLAIMS = (
    "At init, Post-LN's identity path shrinks by (v(1 + r))^(-1/2) per sublayer, as the notes derive",
    "The notes' assumption at init: Var(F(x)) = Var(x) in Post-LN (Xavier)",
)


def fresh(mean: float, k: int = 0) -> list[float]:
    """Six per-seed values around ``mean`` (one per fresh seed)."""
    return [mean + 0.01 * math.sin(k + 2 * s) for s in NORM_FRESH]


BEST = {"long_steps": 3000, "best": {p: {"lr": 3e-3, "warmup": 100} for p in ("post", "pre")}, "to_plateau": {}}


def norm_training(
    warm=None,
    rescue=None,
    change_power=-1.0,
    lrs=LRS,
    lets=None,
    point=True,
    versus=None,
    optimizers=None,
):
    losses = {**WARM_LOSS, **(warm or {})}
    warm_loss = {
        (p, d, w, lr): jitter(v, i + j) for j, lr in enumerate(lrs) for i, ((p, d, w), v) in enumerate(losses.items())
    }
    lets = {k: v if isinstance(v, list) else fresh(v, i) for i, (k, v) in enumerate({**LETS, **(lets or {})}.items())}
    versus = {k: fresh(v, i)[:5] for i, (k, v) in enumerate({**VERSUS, **(versus or {})}.items())}
    optimizers = {
        k: {"lr": 1e-3, "final": fresh(v, i)[:4]}
        for i, (k, v) in enumerate({**OPTIMIZERS, **(optimizers or {})}.items())
    }
    rescue = {
        "lr": 1e-2,
        "post_fails_in_sweep": True,
        "post": jitter(4.0),
        "deepnorm": jitter(1.6, 1),
        **(rescue or {}),
    }
    noise = (0.0, 0.01, -0.01)
    layers = np.arange(1, DEEP + 1)
    rel_change = {"pre": [0.5 * layers ** (change_power + e) for e in noise], "post": [np.ones(DEEP)] * 3}
    v = notebook_verdicts(
        "norm_training",
        warm_loss=warm_loss,
        scans={"scans": {}, "depth": None, "pick": None},
        point={"lr": 3e-4, "warmup": 500, "dev_loss": 2.3, "trains": True} if point else None,
        lets={"scan": {}, "point": None, **lets} if point else {"warmup": [], "no warmup": []},
        **BEST,
        versus=versus,
        optimizers=optimizers,
        deep_warmup=500,
        warm_depth=DEEP,
        rescue=rescue,
        floor=UNIGRAM,
        rel_change=rel_change,
        WARMUP_LRS=lrs,
        SHALLOW=SHALLOW,
        DEEP=DEEP,
        SEEDS=SEEDS,
        FRESH=NORM_FRESH,
        FAIL_MARGIN=0.5,
        ceiling=CEILING,
        base={},
        fig_train=None,
    )
    assert list(v) == list(NORM_CLAIMS)
    return [v[c] for c in NORM_CLAIMS]


def norm_placement(identity_rate=0.50, predicted_rate=0.52, log2_var=-0.3):
    probe_depths, noise = (6, 48), (0.0, 0.01, -0.01)
    init = {  # halvings per layer of the identity path, measured and predicted, per initialisation
        ("post", d): {
            "identity_decay": [identity_rate + e for e in noise],
            "predicted_decay": [predicted_rate + e / 2 for e in noise],
            "log2_var": [log2_var + e for e in noise],
        }
        for d in probe_depths
    }
    v = notebook_verdicts(
        "norm_placement", init=init, xiong={}, PROBE_DEPTHS=probe_depths, PROBE_SEEDS=SEEDS, base={}, fig_init=None
    )
    assert list(v) == list(INIT_CLAIMS)
    return [v[c] for c in INIT_CLAIMS]


def test_norm_training_verdicts():
    assert norm_training() == [HOLDS] * 6
    # warmup is what lets deep Post-LN train: either part refutes it
    assert norm_training(lets={"no warmup": 2.15})[0] == FAILS  # trains without warmup, and better
    assert norm_training(lets={"no warmup": 2.40})[0] == FAILS  # worse without warmup, but it trains
    assert norm_training(lets={"no warmup": CEILING})[0] == HOLDS  # a diverged run counts as ln V
    assert norm_training(lets={"no warmup": 2.80})[0] == UNSURE  # on the failure line
    # one seed of six trains without warmup: the interval of the gap stays above 0, of the loss crosses the line
    assert norm_training(lets={"no warmup": [3.32] * 5 + [2.2]})[0] == UNSURE
    assert norm_training(point=False)[0] == UNSURE  # the scan found nowhere it trains: nothing to rescue
    assert norm_training({("pre", DEEP, False): 1.50})[1] == FAILS  # gap 0.10 > the 0.05 margin
    assert norm_training({("pre", DEEP, False): 1.445})[1] == UNSURE  # gap 0.045: the interval crosses 0.05
    assert norm_training(versus={"post": 1.52})[2] == UNSURE  # a tie is no win
    assert norm_training(versus={"post": 1.56})[2] == FAILS  # Pre-LN ends lower at both best settings
    assert norm_training(optimizers={("pre", "sgd"): 3.00})[3] == FAILS  # SGD costs pre more than post
    assert norm_training(optimizers={("pre", "sgd"): 2.80})[3] == UNSURE  # 0.7 against 0.7: the same cost
    assert norm_training(rescue={"deepnorm": jitter(4.1, 1)})[4] == FAILS  # no better than failing Post-LN
    assert norm_training(rescue={"deepnorm": jitter(3.9, 1)})[4] == FAILS  # better, but still near ln V
    # Better than Post-LN and 1.2 nats below ln V, but within 0.5 nats of the unigram loss: it failed too
    assert norm_training(rescue={"deepnorm": jitter(3.0, 1)})[4] == FAILS
    assert norm_training(rescue={"post_fails_in_sweep": False})[4] == UNSURE  # nothing to rescue
    assert norm_training(change_power=0.2)[5] == FAILS


def test_norm_placement_verdicts():
    assert norm_placement() == [HOLDS] * 2
    # the identity path does not shrink towards the input (and the prediction says so too)
    assert norm_placement(identity_rate=-0.05, predicted_rate=-0.05)[0] == FAILS
    assert norm_placement(identity_rate=0.0, predicted_rate=0.0)[0] == UNSURE  # flat: neither shrinks nor grows
    assert norm_placement(predicted_rate=1.0)[0] == FAILS  # the notes' r = 1: 0.5 halvings per layer off
    assert norm_placement(predicted_rate=0.35)[0] == FAILS  # shrinks, but 0.15 per layer faster than predicted
    assert norm_placement(predicted_rate=0.595)[0] == UNSURE  # 0.095 off: the interval crosses the 0.1 margin
    assert norm_placement(log2_var=-2.0)[1] == FAILS  # Var(F) a quarter of Var(x)


def test_norm_training_at_one_training_depth():
    v = notebook_verdicts(
        "norm_training",
        warm_loss={
            (p, 2, w, 1e-3): jitter(1.5 + (not w) * (p == "post") * 0.5) for p in ("post", "pre") for w in (1, 0)
        },
        scans={"scans": {}, "depth": None, "pick": None},
        point=None,
        lets={"warmup": [], "no warmup": []},
        **BEST,
        versus={p: jitter(1.5)[:2] for p in ("post", "pre")},
        optimizers={(p, o): {"lr": 1e-3, "final": jitter(1.5)[:2]} for p in ("post", "pre") for o in ("adam", "sgd")},
        deep_warmup=3,
        warm_depth=2,
        rescue={"lr": 3e-3, "post_fails_in_sweep": False, "post": jitter(1.5), "deepnorm": jitter(1.5)},
        floor=UNIGRAM,
        rel_change={"pre": [np.asarray([0.5, 0.3])] * 2, "post": [np.ones(2)] * 2},
        WARMUP_LRS=(1e-3,),
        SHALLOW=2,
        DEEP=2,
        SEEDS=(0, 1),
        FRESH=(3, 4),
        FAIL_MARGIN=0.5,
        ceiling=CEILING,
        base={},
        fig_train=None,
    )
    assert v[NORM_CLAIMS[0]] == UNSURE and v[NORM_CLAIMS[4]] == UNSURE


# mixture_of_experts: final losses by arm and seed (seeds 0-2), and on the fresh seeds for DeepSeekMoE
# against GShard top-2; the expert loads are a measured table, not a verdict.
MOE_FINAL = {"dense": 1.60, "switch top-1": 1.58, "gshard top-2": 1.55, "deepseekmoe": 1.54}
MOE_FRESH = {"gshard top-2": 1.55, "deepseekmoe": 1.52}
LOADS = {"gshard top-2": 1.1, "gshard, no balancing": 2.5, "gshard, loss-free bias": 1.2}
MOE_CLAIMS = (
    "At equal active parameters MoE beats dense in the same steps",
    "Fine-grained + shared experts beat coarse top-2 at the same compute",
)
FRESH = tuple(range(3, 11))


def moe(final=None, fresh=None):
    final = {k: jitter(v, i) for i, (k, v) in enumerate({**MOE_FINAL, **(final or {})}.items())}
    fresh = {
        k: [v + 0.002 * math.sin(i + 3 * s) for s in FRESH]
        for i, (k, v) in enumerate({**MOE_FRESH, **(fresh or {})}.items())
    }
    loads = {k: jitter(v, i, 0.01) for i, (k, v) in enumerate(LOADS.items())}
    v = notebook_verdicts(
        "mixture_of_experts",
        final=final,
        fresh_final=fresh,
        max_over_mean=loads,
        load_table={},
        loads={},
        curves={},
        fresh_curves={},
        sweeps={},
        fig_loss=None,
        fig_load=None,
        fig_fresh=None,
        configs={},
        SEEDS=SEEDS,
        FRESH=FRESH,
        FINE=tuple(MOE_FRESH),
    )
    return [v[c] for c in MOE_CLAIMS]


def test_mixture_of_experts_verdicts():
    assert moe() == [HOLDS, HOLDS]
    assert moe({"gshard top-2": 1.60})[0] == UNSURE  # a tie with dense
    assert moe({"gshard top-2": 1.65})[0] == FAILS
    assert moe({"switch top-1": 1.50, "gshard top-2": 1.61})[0] == FAILS  # the arm fixed in advance decides
    assert moe(fresh={"deepseekmoe": 1.55})[1] == UNSURE  # a tie: no gain
    assert moe(fresh={"deepseekmoe": 1.58})[1] == FAILS  # worse than coarse top-2
    # the seeds whose numbers were seen do not decide claim 2: a gain there alone is no verdict
    assert moe({"deepseekmoe": 1.45}, fresh={"deepseekmoe": 1.55})[1] == UNSURE


# decoding: per-sentence BLEU counts, lengths and seed agreement; per-token cost by position.
DECODING_CLAIMS = (
    "Beam search beats greedy",
    "Sampling trades quality for diversity",
    "Beam search with a length penalty does not shorten the output",
    "... nor than the references",
    "Without the penalty (alpha 0) beam search's output is shorter",
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


def decoding(items=None, sized_rate=1.0, ratio_rate=1.0, fixed=None, ref_words=10.0):
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
        ref_words=ref_words + np.random.default_rng(6).choice([-1.0, 1.0], size=len(REFS)),
        positions=positions,
        times=times,
        kept={"machine": {"host": "h", "cpus": 2}},
        examples={},
        fig_strat=None,
        fig_cache=None,
        run=types.SimpleNamespace(cfg={}),
    )
    return [v[c] for c in DECODING_CLAIMS]


def test_decoding_strategy_verdicts():
    assert decoding() == [HOLDS] * 7
    assert decoding({"beam 4": _strategy(0.3, 1.0, seed=1)})[0] == UNSURE  # the same output as greedy
    assert decoding({"beam 4": _strategy(0.45, 1.0, seed=2)})[0] == FAILS
    assert decoding({"top-p (p=0.9)": _strategy(0.15, 0.1, seed=5)})[1] == FAILS  # a sampler better than greedy
    assert decoding({"top-k (k=10)": _strategy(0.5, 1.0, seed=4)})[1] == UNSURE  # not random after all
    assert decoding({"beam 4": _strategy(0.15, 1.0, -0.05, seed=2)})[2] == HOLDS  # 0.05 shorter: within 0.5
    assert decoding({"beam 4": _strategy(0.15, 1.0, -1.0, seed=2)})[2] == FAILS
    assert decoding(ref_words=10.5)[3] == UNSURE  # 0.5 words shorter than the references: at the margin
    assert decoding(ref_words=12.0)[3] == FAILS
    # alpha 0 as long as alpha 0.6: the penalty changed nothing; longer: the opposite of the claim
    assert decoding({"beam 4, alpha 0": _strategy(0.15, 1.0, seed=3)})[4] == UNSURE
    assert decoding({"beam 4, alpha 0": _strategy(0.15, 1.0, 1.0, seed=3)})[4] == FAILS


def test_decoding_kv_cache_verdicts_use_the_slopes():
    assert decoding(sized_rate=1.5)[5] == FAILS  # cached cost grows faster than linearly
    assert decoding(ratio_rate=0.3)[5] == FAILS  # recompute only 0.3 of a power faster
    assert decoding(fixed={64: 1.0, 128: 2.1, 256: 3.9, 512: 8.2, 1024: 16.0})[6] == HOLDS  # linear is allowed
    assert decoding(fixed={64: 1.0, 128: 4.1, 256: 15.9, 512: 64.2, 1024: 256.0})[6] == FAILS
    # a per-token time that timing noise made <= 0 cannot be fitted: inconclusive, not an error
    assert decoding(fixed={64: -0.1, 128: 2.1, 256: 3.9, 512: 8.2, 1024: 16.0})[6] == UNSURE


# language_model_history: perplexities and speeds of every arm, by seed.
WIN, LSTM, TF = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
TIMED = lambda n: f"{n}, equal wall-clock"
LONG = lambda n: f"{n}, context 256"
LM_ROWS = {
    "4-gram (Kneser-Ney, order chosen on dev)": {"val perplexity": 8.0, "tokens/s": None, "parameters": 0},
    WIN: {"val perplexity": 7.0, "tokens/s": 9000.0, "parameters": 100_000},
    LSTM: {"val perplexity": 6.0, "tokens/s": 1000.0, "parameters": 200_000},
    TF: {"val perplexity": 5.0, "tokens/s": 5000.0, "parameters": 200_000},
    TIMED(WIN): {"val perplexity": 6.8, "tokens/s": 9000.0, "parameters": 100_000},
    TIMED(LSTM): {"val perplexity": 6.5, "tokens/s": 1000.0, "parameters": 200_000},
    LONG(LSTM): {"val perplexity": 5.9, "tokens/s": 900.0, "parameters": 200_000},
    LONG(TF): {"val perplexity": 4.6, "tokens/s": 4000.0, "parameters": 200_000},
}
LM_CLAIMS = (
    "A neural fixed-window LM beats the n-gram",
    "An RNN beats the fixed-window LM",
    "The Transformer beats the RNN at about the same parameters and steps",
    "The Transformer beats the RNN at equal wall-clock",
    "The Transformer trains faster than the RNN",
)


def lm_history(changes=None):
    arms, rounds = {}, {}
    for i, (name, row) in enumerate(LM_ROWS.items()):
        row = {**row, **(changes or {}).get(name, {})}
        counted = "gram" in name  # a count: the same every seed
        ppl = [row["val perplexity"]] * 3 if counted else jitter(row["val perplexity"], i, 0.02)
        if row["tokens/s"] is not None and "wall-clock" not in name:  # timed once per model, in rounds
            rounds[name] = [768 / r for r in jitter(row["tokens/s"], i, 20.0)]
        steps = [2000 if name != TIMED(LSTM) else 400] * 3
        arms[name] = arm(**{"val perplexity": ppl, "parameters": [row["parameters"]] * 3, "steps": steps})
    v = notebook_verdicts(
        "language_model_history",
        arms=arms,
        LONG=256,
        curves={},
        fig=None,
        configs={},
        SEEDS=SEEDS,
        dev_loss={},
        ORDER=4,
        sweeps={},
        speed={"rounds": rounds},
        tokens_per_step=768,
        budget_s=1.0,
    )
    assert list(v) == list(LM_CLAIMS)
    return [v[c] for c in LM_CLAIMS]


def test_language_model_history_verdicts():
    assert lm_history() == [HOLDS] * 5
    assert lm_history({WIN: {"val perplexity": 8.1}})[0] == FAILS  # worse than the n-gram chosen on dev
    assert lm_history({LSTM: {"val perplexity": 7.0}})[1] == UNSURE  # a tie is no win
    assert lm_history({TIMED(LSTM): {"val perplexity": 7.0}})[1] == FAILS  # loses at equal wall-clock
    assert lm_history({TF: {"val perplexity": 6.6}})[2:4] == [FAILS, FAILS]
    assert lm_history({LONG(TF): {"val perplexity": 6.0}})[2] == FAILS  # the long context turns it
    assert lm_history({TIMED(LSTM): {"val perplexity": 4.9}})[3] == FAILS
    assert lm_history({TF: {"tokens/s": 900.0}})[4] == FAILS


def test_language_model_history_without_a_speed_is_inconclusive():
    assert lm_history({LSTM: {"tokens/s": None}})[4] == UNSURE
    assert lm_history({LONG(LSTM): {"tokens/s": None}})[4] == UNSURE
