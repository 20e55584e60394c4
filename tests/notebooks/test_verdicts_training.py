"""Verdicts of the training-heavy notebooks (norm_placement, norm_training, mixture_of_experts,
language_model_history) on synthetic per-seed or per-sentence inputs whose answer is known; see
``test_verdicts.py`` for the scheme and ``verdict_cells.py`` for how a cell is run."""

import math

import numpy as np

from tests.notebooks.verdict_cells import FAILS, HOLDS, SEEDS, UNSURE, arm, jitter, notebook_verdicts

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
NORM_FRESH = {
    "warmup": (3, 4, 5, 6, 7, 8),
    "versus": (3, 4, 5, 6, 7, 8, 9),
    "optimizers": (3, 4, 5, 6, 7),
    "rescue": (10, 11, 12),
    "change": (10, 11, 12),
}
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


def fresh(mean: float, k: int = 0, claim: str = "warmup") -> list[float]:
    """Per-seed values around ``mean``, one per fresh seed of ``claim``."""
    return [mean + 0.01 * math.sin(k + 2 * s) for s in NORM_FRESH[claim]]


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
    versus = {k: fresh(v, i, "versus") for i, (k, v) in enumerate({**VERSUS, **(versus or {})}.items())}
    optimizers = {
        k: {"lr": 1e-3, "final": fresh(v, i, "optimizers")}
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
    rel_change = {  # by seed, as `ablation.norm_sections.relative_changes` gives them; seeds 0-2 are not judged
        "pre": {s: 0.5 * layers ** (-change_power + e) for s, e in enumerate(noise)},
        "post": dict(enumerate([np.ones(DEEP)] * 3)),
    }
    rel_change_fresh = {"pre": {s: 0.5 * layers ** (change_power + e) for s, e in zip(NORM_FRESH["change"], noise)}}
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
        rel_change_fresh=rel_change_fresh,
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
    assert norm_training(change_power=0.2)[5] == FAILS  # judged on the fresh seeds, not on seeds 0-2 (which fall)


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
        rel_change={"pre": dict(enumerate([np.asarray([0.5, 0.3])] * 2)), "post": dict(enumerate([np.ones(2)] * 2))},
        rel_change_fresh={"pre": {s: np.asarray([0.5, 0.3]) for s in (10, 11)}},
        WARMUP_LRS=(1e-3,),
        SHALLOW=2,
        DEEP=2,
        SEEDS=(0, 1),
        FRESH={**{k: (3, 4) for k in ("warmup", "versus", "optimizers")}, "rescue": (10, 11), "change": (10, 11)},
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


# language_model_history: losses, parameters and speeds of every arm, by seed.
WIN, LSTM, TF = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
TIMED = lambda n: f"{n}, equal wall-clock"
LONG = lambda n: f"{n}, context 256"
SIZED = lambda n, f: f"{n}, {f:.0%} of the plays"
LM_ROWS = {  # val loss (nats), tokens/s (None: not timed), parameters (stored counts for an n-gram)
    WIN: (1.95, 9000.0, 100_000),
    LSTM: (1.80, 1000.0, 200_000),
    TF: (None, 5000.0, 200_000),
    TIMED(WIN): (1.90, None, 100_000),
    TIMED(LSTM): (1.85, None, 200_000),
    LONG(LSTM): (None, 900.0, 200_000),
    LONG(TF): (None, 4000.0, 200_000),
    "2-gram (BPE)": (5.0, None, 80_000),
    "3-gram (BPE)": (4.8, None, 300_000),
    "5-gram (BPE)": (4.8, None, 800_000),  # sparse: no better than order 3, four times the memory
    "window 1 (BPE)": (5.1, None, 1_300_000),
    "window 2 (BPE)": (4.9, None, 1_316_000),
    "window 4 (BPE)": (4.7, None, 1_349_000),
    SIZED(LSTM, 0.1): (1.70, None, 200_000),
    SIZED(TF, 0.1): (1.80, None, 200_000),  # worse on little data
    SIZED(LSTM, 0.3): (1.50, None, 200_000),
    SIZED(TF, 0.3): (1.55, None, 200_000),
    SIZED(LSTM, 1.0): (1.40, None, 200_000),
    SIZED(TF, 1.0): (1.38, None, 200_000),  # and ahead with all of it
}
LM_CLAIMS = (
    "A longer context helps the window LM more than the n-gram",
    "The n-gram's memory grows with n faster than the window LM's",
    "On little data the Transformer does worse than the LSTM",
    "The Transformer's gap to the LSTM shrinks as the data grow",
    "An RNN beats the fixed-window LM",
    "The Transformer trains faster than the RNN",
)


def lm_history(changes=None):
    arms, rounds = {}, {}
    for i, (name, (loss, rate, params)) in enumerate(LM_ROWS.items()):
        loss, rate, params = (changes or {}).get(name, (loss, rate, params))
        if rate is not None:  # timed once per model, in rounds
            rounds[name] = [768 / r for r in jitter(rate, i, 20.0)]
        if loss is None:
            continue
        counted = "gram" in name  # a count: the same every seed
        losses = [loss] * 3 if counted else jitter(loss, i, 0.004)
        per_seed = {"val loss": losses, "val perplexity": [math.exp(v) for v in losses], "parameters": [params] * 3}
        arms[name] = arm(**per_seed)
    v = notebook_verdicts(
        "language_model_history",
        arms=arms,
        LONG=256,
        WINDOWS=(1, 2, 4),
        SIZES=(0.1, 0.3, 1.0),
        curves={},
        fig=None,
        configs={},
        SEEDS=SEEDS,
        sweeps={},
        speed={"rounds": rounds},
        tokens_per_step=768,
        budget_s=1.0,
    )
    assert list(v) == list(LM_CLAIMS)
    return [v[c] for c in LM_CLAIMS]


def test_language_model_history_verdicts():
    assert lm_history() == [HOLDS] * 6
    # the window LM does not gain from a longer window; then it gains, but no more than the n-gram
    assert lm_history({"window 4 (BPE)": (5.1, None, 1_349_000)})[0] == FAILS
    assert lm_history({"5-gram (BPE)": (4.5, None, 800_000)})[0] == FAILS
    # the check: the n-gram adding fewer counts than the window LM adds weights
    assert lm_history({"5-gram (BPE)": (4.8, None, 90_000)})[1] == FAILS
    # the Transformer already ahead on little data; its gap growing with the data
    assert lm_history({SIZED(TF, 0.1): (1.60, None, 200_000)})[2] == FAILS
    assert lm_history({SIZED(TF, 1.0): (1.60, None, 200_000)})[3] == FAILS
    assert lm_history({SIZED(TF, 0.3): (1.65, None, 200_000)})[3] == FAILS  # 10% -> 30% widens it
    assert lm_history({LSTM: (1.95, 1000.0, 200_000)})[4] == UNSURE  # a tie is no win
    assert lm_history({TIMED(LSTM): (1.95, None, 200_000)})[4] == FAILS  # loses at equal wall-clock
    assert lm_history({TF: (None, 900.0, 200_000)})[5] == FAILS


def test_language_model_history_without_a_speed_is_inconclusive():
    assert lm_history({LSTM: (1.80, None, 200_000)})[5] == UNSURE
    assert lm_history({LONG(LSTM): (None, None, 200_000)})[5] == UNSURE
