# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # From n-grams to Transformers: what the notes claim, measured
#
# **What the notes claim** (the verdicts):
# 1. a larger n gives an n-gram more context, but its counts go sparse and its memory grows, and a
#    smaller n costs accuracy; a fixed-window neural LM has no sparsity or memory problem (notes 004,
#    lines 75-77). Measured where sparsity bites, on BPE tokens (SentencePiece, 4,000 pieces):
#    Kneser-Ney n-grams of order 2-5 against window LMs seeing the same 1, 2 or 4 tokens. Verdict: the
#    longer context helps the window LM, and more than the n-gram. Memory is deterministic: a check;
# 2. a Transformer needs much data: on a small dataset it overfits and does worse than the classic
#    sequence models (notes 000, line 67). LSTM against Transformer on 10, 30 and 100% of the training
#    plays of Shakespeare's 38 (4.3 MB), validated on 4 held-out plays: worse at 10%, and the gap shrinks;
# 3. an RNN is not held to a fixed window and handles long text much better (004, line 81): LSTM
#    against the window LM on characters, at equal steps and at equal wall-clock;
# 4. an RNN trains slowly, since it cannot be parallelised like a Transformer (004, line 81): tokens/s.
#
# **Not claimed by the notes**, so no verdict: a Transformer beating an RNN at this scale; the window
# LM reaching a lower perplexity than the n-gram at a fixed n.
#
# **Like for like.** Every neural arm's peak LR is picked on a dev split (the last 10% of its own
# training text, `ablation.sweep_lr`) at every window and data size; seeds 0-2 (initialisation and
# data order), paired by seed; an n-gram is a count, the same for every seed. Fixed budgets, equal
# for the arms compared: 1,000 steps of 12 x 64 BPE tokens for the window LMs (about 2.5 passes);
# 3,000 steps of 12 x 64 characters at every data size (about 5, 1.8 and 0.5 passes at 10, 30 and
# 100%), so the sizes differ only in the distinct text behind the same compute. Speed: train steps
# timed side by side in alternating rounds (`ablation.time_steps`), kept from the first sitting.
# Run summaries are kept in `experiments/results/language_model_history/runs/` and reused later.
# `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, 2 seeds; it decides nothing.

# %%
# On Colab (or wherever transformer-jax is not installed yet) this cell installs it from its
# repository, at the versions of its constraints.txt, with the CUDA or TPU build of jax when the
# runtime has a GPU or TPU. For a fork or a wheel instead, set TRANSFORMER_JAX_SOURCE to its git URL
# ("git+https://github.com/YOU/transformer-jax") or path ("/content/transformer_jax-0.1.0-py3-none-any.whl").
import glob
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

if "google.colab" in sys.modules and importlib.util.find_spec("transformer_jax") is None:
    REPOSITORY = "https://github.com/transformer-jax/transformer-jax"  # pyproject.toml [project.urls]
    source = os.environ.get("TRANSFORMER_JAX_SOURCE") or f"git+{REPOSITORY}"
    if os.path.exists(source):
        source = pathlib.Path(source).resolve().as_uri()
    tpu = os.environ.get("TPU_ACCELERATOR_TYPE") or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
    extra = "[gpu]" if shutil.which("nvidia-smi") else "[tpu]" if tpu else ""
    constraints = f"{REPOSITORY}/raw/main/constraints.txt"
    pip = [sys.executable, "-m", "pip", "install", "-q", "-c", constraints, f"transformer-jax{extra} @ {source}"]
    subprocess.run(pip, check=True)

# %%
import dataclasses
from typing import Any

import jax
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.ablation import lm_history
from transformer_jax.models import (
    BaselineConfig,
    EmbeddingsConfig,
    InitConfig,
    KneserNeySmoothing,
    LSTMCellConfig,
    NgramConfig,
    RNNLMConfig,
    WindowLMConfig,
    baseline_model_config,
    with_changes,
)

NOTEBOOK = "language_model_history"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
LONG = ablation.pick(smoke=128, full=256)
WIN, LSTM, TF = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
BPE_VOCAB, BPE_STEPS = ablation.pick(smoke=320, full=4000), ablation.pick(smoke=20, full=1000)
WINDOWS = ablation.pick(smoke=(1, 2), full=(1, 2, 4))  # tokens seen; the n-gram of order w + 1 sees as many
ORDERS = ablation.pick(smoke=(2, 3), full=(2, 3, 4, 5))
SIZES, SIZE_STEPS = ablation.pick(smoke=(0.02, 0.05, 0.1), full=(0.1, 0.3, 1.0)), ablation.pick(smoke=20, full=3000)
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %% [markdown]
# ## Claims, registered
# Each row's claim (in our words, with the notes' file and lines), measure, criterion, what would
# refute it, and n with its power calculation; results.json stores them, and a test fails when they
# change after the run. A `check` is deterministic: shown, never a verdict.
#
# **The first row's power, read after sitting 1** (not a re-registration: its spec stays as run). Its n
# comes from a pilot at character level (paired sd 0.0053 nats), but the row is in nats per BPE token.
# Sitting 1's BPE window LMs give (window 4 - window 1) of -0.126, -0.159 and -0.173 nats on seeds 0-2:
# a paired sd of 0.024, 4.5 times the pilot's. At that sd `ablation.Power` (effect 0.02, alpha 0.025,
# power 0.8) asks n=14, and at the 3 seeds run it has power of about 0.05: for an effect of 0.02 the row
# is underpowered (the gallery's label reads the registered calculation, so it will not say so). The
# effects measured are larger: the gain is -0.152 [-0.212, -0.093], and minus the n-gram's -0.256 (a
# count, so the same sd) +0.104 [+0.044, +0.163] (95% paired t, n=3). Both intervals clear 0, so
# neither part's verdict hinges on the seed count; an "inconclusive" would have.

# %%
REGISTERED = ablation.REGISTERED_AFTER_FULL_RUN
BEFORE = ablation.Revision("2026-12-05", "registered", "before the FULL run that judges it (issue 39, item 3)")
# Power's alpha=0.05: the default sittings 1-2 ran under (registered.json); the gallery labels rows short at 0.025
PILOT = "the FULL run of 2026-12-04 (character level, 3 seeds): paired sd of the val loss {} is {} nats"
claim = lambda name, **kw: ablation.Claim(
    name, **{"notes": "004_0c7acc088a14ef8a.txt", "n": 3, "history": (BEFORE,), **kw}
)
CLAIMS = ablation.register(
    claim(
        "A longer context helps the window LM more than the n-gram",
        lines=(73, 77),
        says="a larger n gives an n-gram more context but its counts go sparse and its memory grows, and a "
        "smaller n costs accuracy; a neural LM over a fixed window has no memory or sparsity problem",
        measure="validation loss (nats per BPE token), window LM at window 4 minus at window 1, paired by seed; "
        "then that change minus the Kneser-Ney n-gram's from order 2 to order 5 (the same 1 and 4 tokens of "
        "context; a count, the same for every seed)",
        criteria=(ablation.Criterion("less"), ablation.Criterion("less")),
        why="directions. Refuted if the window LM does not gain from the longer window (the first interval "
        "above 0) or gains no more than the n-gram (the second above 0): the counts did not go sparse at "
        "these n, or the neural LM stalls as they do",
        power=ablation.Power(
            sd=0.0053, effect=0.02, pilot=PILOT.format("between two window-LM arms", "0.0053"), alpha=0.05
        ),
    ),
    claim(
        "The n-gram's memory grows with n faster than the window LM's",
        lines=(73, 77),
        says="as n grows the n-gram needs more space; the window LM has no memory problem",
        measure="(stored counts of the order-5 n-gram - of the order-2) / (parameters of the window-4 LM - of "
        "the window-1 LM): what one more token of context costs each",
        criteria=(ablation.Criterion("greater", 1.0),),
        why="deterministic counts (no seeds), so a check: the window LM adds d_model x d_ff weights per token "
        "of window whatever the data; the n-gram adds the distinct new n-grams of the training text",
        check=True,
        n=1,
    ),
    claim(
        "On little data the Transformer does worse than the LSTM",
        notes="000_20579b809c9e1b51.txt",
        lines=(67, 67),
        says="the Transformer depends on large data: on a small dataset it overfits easily and does worse "
        "than the classic sequence models",
        measure="validation loss (nats per character, 4 held-out plays), Transformer minus LSTM at 10% of "
        "the training plays (0.43M characters), each arm's LR tuned on dev at that size, paired by seed",
        criteria=(ablation.Criterion("greater"),),
        why="a direction. Refuted if the interval lies below 0: the Transformer is better even on the "
        "smallest training text",
        power=ablation.Power(sd=0.0030, effect=0.02, pilot=PILOT.format("Transformer - LSTM", "0.0030"), alpha=0.05),
    ),
    claim(
        "The Transformer's gap to the LSTM shrinks as the data grow",
        notes="000_20579b809c9e1b51.txt",
        lines=(67, 67),
        says="the same limit read as a trend: what the Transformer lacks is data, so its disadvantage "
        "against the classic model falls as the training text grows",
        measure="(Transformer - LSTM validation loss) at 10% minus at 30% of the training plays, then at "
        "30% minus at 100%, paired by seed",
        criteria=(ablation.Criterion("greater"), ablation.Criterion("greater")),
        why="directions. Refuted if either interval lies below 0: the gap grows with the data",
        power=ablation.Power(
            sd=0.0042, effect=0.02, pilot=PILOT.format("Transformer - LSTM", "0.0030 (x sqrt 2)"), alpha=0.05
        ),
    ),
    claim(
        "An RNN beats the fixed-window LM",
        says="an RNN is not held to a fixed window and handles long sentences much better",
        lines=(81, 81),
        measure="validation perplexity, LSTM minus window LM, at equal steps, then at equal wall-clock",
        criteria=(ablation.Criterion("less"),),
        why="directions",
        history=(REGISTERED,),
    ),
    claim(
        "The Transformer trains faster than the RNN",
        says="an RNN trains slowly, more so for long sentences, since it cannot be parallelised like a Transformer",
        lines=(81, 81),
        measure="training tokens/s, Transformer minus LSTM, paired by timing round, context 64 then 256",
        criteria=(ablation.Criterion("greater"),),
        why="directions",
        n=9,
        history=(REGISTERED,),
    ),
)

# %%
# FULL: one validation pass, at the end (only the final loss is read)
transformer = ablation.shakespeare_config(
    NOTEBOOK, steps=STEPS, **ablation.pick(smoke={}, full={"eval": {"every": STEPS}})
)
V = transformer.model.dims.vocab_size


def baseline(kind: str, settings: BaselineConfig, **model) -> Any:
    return dataclasses.replace(transformer, model=baseline_model_config(kind, settings, vocab_size=V, **model))


PLAIN = {"dropout": 0.0, "init": InitConfig(std=1.0)}  # the neural baselines' settings
window = lambda w, d, d_ff: baseline(
    "window_lm",
    WindowLMConfig(window=w),
    d_model=d,
    d_ff=d_ff,
    n_layers=1,
    embeddings=EmbeddingsConfig(tie=False),
    **PLAIN,
)
neural = {
    WIN: window(ablation.pick(smoke=4, full=16), ablation.pick(smoke=8, full=48), ablation.pick(smoke=32, full=960)),
    LSTM: baseline(
        "rnn_lm", RNNLMConfig(cell=LSTMCellConfig()), d_model=ablation.pick(smoke=16, full=222), n_layers=2, **PLAIN
    ),
    TF: transformer,
}
GRIDS = {
    WIN: ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(3e-3)),
    LSTM: ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(3e-3)),
}


def long_context(name: str, cfg: Any) -> Any:
    """``cfg`` at context LONG with the same characters per step (the Transformer's table grown to LONG)."""
    model = with_changes(cfg.model, max_len=LONG) if name == TF else cfg.model
    same_chars = dataclasses.replace(cfg.train, batch_size=max(1, tokens_per_step // LONG))
    return dataclasses.replace(cfg, model=model, data=dataclasses.replace(cfg.data, seq_len=LONG), train=same_chars)


tokens_per_step = transformer.train.batch_size * transformer.data.seq_len

# %% [markdown]
# ## Speed: each model's train step, timed side by side (on a quiet machine; later sittings read it back)

# %%
timed_configs = {**neural, **{f"{n}, context {LONG}": long_context(n, neural[n]) for n in (LSTM, TF)}}
speed = ablation.time_steps(
    timed_configs, NOTEBOOK, rounds=ablation.pick(smoke=2, full=9), steps=ablation.pick(smoke=2, full=20)
)
step_s = {n: speed["seconds_per_step"][n] for n in neural}
print(f"timed on {speed['machine']} ({speed['date']}); seconds per step (median of {speed['rounds_n']} rounds):")
print({n: round(v, 4) for n, v in speed["seconds_per_step"].items()})

# %% [markdown]
# ## Characters: LSTM against window LM, at equal steps and in the Transformer's 2,000 steps' time
# (the timed seconds per step; the same LR, the schedule stretched)

# %%
curves, configs, sweeps = {}, {}, {}
for name in (WIN, LSTM):
    sweeps[name] = ablation.sweep_lr(neural[name], name, GRIDS[name], NOTEBOOK)
    configs[name] = ablation.with_lr(neural[name], sweeps[name]["lr"])
budget_s = STEPS * step_s[TF]
for n in (WIN, LSTM):
    steps = ablation.steps_for_seconds(budget_s, step_s[n], minimum=2 * configs[n].train.optim.warmup_steps)
    configs[f"{n}, equal wall-clock"] = ablation.with_steps(configs[n], steps)
for name in list(configs):
    curves.update({(name, s): ablation.run_arm(configs[name], name, s, NOTEBOOK) for s in SEEDS})

# %% [markdown]
# ## BPE tokens: Kneser-Ney n-grams of order 2-5 (one count) against window LMs seeing as many tokens

# %%
for order in ORDERS:
    name = f"{order}-gram (BPE)"
    cfg = ablation.with_steps(baseline("ngram", NgramConfig(ngram_order=order, smoothing=KneserNeySmoothing())), 1)
    configs[name] = lm_history.with_bpe(cfg, BPE_VOCAB)
    fit = ablation.run_arm(configs[name], name, 0, NOTEBOOK)  # a count: the same for every seed
    curves.update({(name, s): fit for s in SEEDS})
bpe_window = lambda w: lm_history.with_budget(
    lm_history.with_bpe(window(w, ablation.pick(smoke=8, full=64), ablation.pick(smoke=16, full=256)), BPE_VOCAB),
    BPE_STEPS,
)
for w in WINDOWS:
    name = f"window {w} (BPE)"
    sweeps[name], configs[name], runs = ablation.tuned_runs(bpe_window(w), name, GRIDS[WIN], NOTEBOOK, SEEDS)
    curves.update({(name, s): c for s, c in zip(SEEDS, runs)})

# %% [markdown]
# ## Data size: the LSTM against the Transformer on 10%, 30% and 100% of the training plays

# %%
corpus = lm_history.data_size_corpus(SIZES)
SIZE_GRIDS = {  # around the picks at context 64 (LSTM 9e-3, Transformer 3e-3)
    LSTM: ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(9e-3)),
    TF: ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(3e-3)),
}


def train_at(f: float) -> None:
    """Both arms on ``f`` of the training plays: each arm's LR tuned on dev at that size, then its seeds."""
    for arm, grid in SIZE_GRIDS.items():
        name = f"{arm}, {f:.0%} of the plays"
        cfg = lm_history.with_budget(lm_history.with_dataset(neural[arm], corpus[f]), SIZE_STEPS)
        sweeps[name], configs[name], runs = ablation.tuned_runs(cfg, name, grid, NOTEBOOK, SEEDS)
        curves.update({(name, s): c for s, c in zip(SEEDS, runs)})


# %%
train_at(SIZES[0])

# %%
train_at(SIZES[1])

# %%
train_at(SIZES[2])

# %%
arms = {}
for name, cfg in configs.items():
    vocab = BPE_VOCAB if "BPE" in name else V
    arms[name] = ablation.arm_record(
        {s: lm_history.seed_record(curves[name, s], cfg.train.steps, vocab) for s in SEEDS}
    )
    print(f"{name:40s}", {k: round(v, 3) for k, v in arms[name]["mean"].items()}, f"(mean of {arms[name]['n']})")

fig = lm_history.figure(arms, ORDERS, WINDOWS, SIZES)
plt.show()

# %% [markdown]
# ## Verdict
# Losses paired by seed (an n-gram's is the same for every seed); tokens/s paired by timing round.

# %%
loss = {n: ablation.seed_values(arms[n], "val loss") for n in arms}
ppl = {n: ablation.seed_values(arms[n], "val perplexity") for n in arms}
params = {n: arms[n]["seeds"][0]["parameters"] for n in arms}
win, lstm, tf = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
timed_name, sized = (lambda n: f"{n}, equal wall-clock"), (lambda n, f: f"{n}, {f:.0%} of the plays")
wide, narrow = (f"window {w} (BPE)" for w in (WINDOWS[-1], WINDOWS[0]))
long_gram, short_gram = (f"{w + 1}-gram (BPE)" for w in (WINDOWS[-1], WINDOWS[0]))
window_gain = np.subtract(loss[wide], loss[narrow])
gram_gain = np.subtract(loss[long_gram], loss[short_gram])
gap = {f: np.subtract(loss[sized(tf, f)], loss[sized(lstm, f)]) for f in SIZES}
pairs = [(SIZES[i], SIZES[i + 1]) for i in range(len(SIZES) - 1)]
memory = (params[long_gram] - params[short_gram]) / (params[wide] - params[narrow])


less = lambda a, b: ablation.paired(ppl[a], ppl[b], expect="less")
lm_history, ctx = ablation.lm_history, f"context {LONG}"
claims = {
    "A longer context helps the window LM more than the n-gram": (
        f"val loss, {wide} - {narrow}; then minus the n-gram's {long_gram} - {short_gram} ({gram_gain[0]:+.3f})",
        [ablation.paired(window_gain, expect="less"), ablation.paired(window_gain, gram_gain, expect="less")],
    ),
    "The n-gram's memory grows with n faster than the window LM's": (
        f"stored counts {params[long_gram]:,} - {params[short_gram]:,} over weights {params[wide]:,} - "
        f"{params[narrow]:,}",
        [lm_history.exact(memory, "greater", 1.0)],
    ),
    "On little data the Transformer does worse than the LSTM": (
        f"val loss Transformer - LSTM at {SIZES[0]:.0%} of the training plays",
        [ablation.paired(gap[SIZES[0]], expect="greater")],
    ),
    "The Transformer's gap to the LSTM shrinks as the data grow": (
        "(Transformer - LSTM) " + ", then ".join(f"at {a:.0%} minus at {b:.0%}" for a, b in pairs),
        [ablation.paired(gap[a], gap[b], expect="greater") for a, b in pairs],
    ),
    "An RNN beats the fixed-window LM": (
        "perplexity LSTM - window, at equal steps, then at equal wall-clock",
        [less(lstm, win), less(timed_name(lstm), timed_name(win))],
    ),
    "The Transformer trains faster than the RNN": (
        f"training tokens/s, Transformer - LSTM, paired by timing round, context 64 then {LONG}",
        [lm_history.faster(speed, a, b, tokens_per_step) for a, b in ((tf, lstm), (f"{tf}, {ctx}", f"{lstm}, {ctx}"))],
    ),
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "arms": arms,
        "lr_sweeps": sweeps,
        "speed": speed,
        "wall_clock_budget_s": budget_s,
        "curves": {f"{n} s{seed}": c for (n, seed), c in curves.items()},
        "verdicts": table,
    },
    figures={"comparison": fig},
    configs=configs,
    seeds=SEEDS,
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## Reading the FULL run
# Issue 39's redo, trained over four sittings (2026-12-05 and 2026-12-06, each from a commit holding
# the registered claims: `registered.json`); 83 runs, 5.8 h summed. Each verdict could have come out
# the other way (what would have turned it is in brackets); two of the three new ones did.
# - **A longer context helps the window LM more than the n-gram: does not hold**, against the notes at
#   this size. On 336,145 training BPE tokens the Kneser-Ney n-gram's held-out loss falls from order 2
#   to 3 (4.546 -> 4.319 nats per token), barely to 4 (4.288) and not to 5 (4.290), while its counts
#   grow 95,590 -> 1,360,933 (the memory check: 25.7 times the window LM's growth). The window LM (LR
#   tuned per window) reaches 4.643, 4.466 and 4.490 at windows 1, 2 and 4: the context helps it
#   (-0.152 [-0.212, -0.093]) but less than the n-gram (+0.104 [+0.044, +0.163] above its -0.256), and
#   it stays above the n-gram at every window. Backoff keeps the n-gram's sparsity cheap here, and
#   1,000 steps (about 2.5 passes) leave the window LM short of it; a larger corpus, where counts at
#   order 5 are rarer still, is where the notes' point would bite, and this run does not reach it.
#   [It would have held with the second interval below 0: the window LM gaining more than the n-gram.]
# - **On little data the Transformer does worse than the LSTM: holds**, with the notes: at 10% of the
#   plays (about 5 passes in 3,000 steps) Transformer - LSTM is +0.091 [+0.067, +0.115] nats/char
#   (1.813 against 1.722, each arm at its own dev-picked LR: 3e-3 and 2.7e-2). [An interval reaching
#   0 or below would have failed it.]
# - **The gap shrinks as the data grow: does not hold**; it grows, from +0.091 at 10% to +0.137 at 30%
#   and +0.153 at 100% (differences -0.046 [-0.058, -0.034], then -0.016 [-0.054, +0.022]). More text
#   lowered the LSTM's loss (1.722 -> 1.586 -> 1.527) more than the Transformer's (1.813 -> 1.722 ->
#   1.680). At about 800k parameters and a fixed 3,000 steps the Transformer is held back by the step
#   budget rather than the data: at 100% neither arm sees a character twice. The notes' limit may hold
#   where a Transformer is data-bound (longer training, a larger model); this run is not that regime,
#   so it reads as "not at this scale", not as a refutation of the notes' line in general. [Both
#   differences above 0 would have made it hold.]
# - **Kept from the run of 2026-12-04** (its runs and timing reused, 3 seeds): the LSTM beats the
#   window LM on characters at equal steps (perplexity 4.555 against 5.540) and at equal wall-clock
#   (4.616 in 1,744 steps against 5.168 in 4,373), siding with the notes; the Transformer trains
#   faster in tokens/s than the LSTM at contexts 64 and 256 (+933 and +1,760 tokens/s), siding with the
#   notes' parallelism.
