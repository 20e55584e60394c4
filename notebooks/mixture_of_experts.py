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
# # Mixture-of-Experts at equal active parameters
#
# An MoE layer replaces the FFN with E expert FFNs of which each token uses k: more parameters at
# the same compute per token. **What the notes claim** (notes 002, lines 107-136; the verdicts):
# 1. only a few experts compute for each token, so MoE adds capacity without adding compute, and
#    the added capacity improves performance (lines 134-136): at equal active parameters MoE
#    reaches a lower loss than the dense model in the same steps;
# 2. DeepSeekMoE's finer experts, more of them chosen per token, with shared experts that every
#    token uses, keep the total compute constant and raise the model's specialisation (lines
#    124-130): at the same compute it beats coarse top-2 routing.
#
# **Measured, not claimed by the notes** (a table, no verdict): the notes do not discuss how the
# router spreads the load, so the expert load without balancing, with the balance loss of Switch
# and GShard, and with DeepSeek-V3's auxiliary-loss-free bias is shown as measured.
#
# Character-level Shakespeare, 4 layers, d_model 128. Dense FFN width 512; MoE: 8 experts of
# width 512 top-1 (Switch), 8 of width 256 top-2 (GShard), or the same split 4 ways with one
# shared (DeepSeekMoE: 1 shared + top-7 of 31 routed experts of width 64): 512 active hidden units
# per token everywhere. All dropless; every balanced arm uses the same Switch balance loss
# (coefficient 0.01), DeepSeekMoE included, so that the fine-grained comparison changes one thing.
# The learning rates of dense, Switch, GShard and DeepSeekMoE are each the best of 1/3, 1 and
# 3 x 1e-3 (grown by 3x past an edge that wins, up to twice) on a dev split carved from the end of
# the training text (one seed, `ablation.sweep_lr`); the two balancing variants, measured for
# their load, take GShard's.
# Every arm runs several seeds (initialisation and data order; arms paired by seed) and each
# verdict comes from a 95% interval over seeds. Claim 2 is judged on fresh seeds (3-10), not on the
# seeds 0-2 whose numbers were seen before it was registered (see `CLAIMS`).
# `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, 2 seeds; its verdicts decide nothing.

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
import math

import jax
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import BalanceLossConfig, SoftmaxRouter
from transformer_jax.train.metrics import read_metrics

NOTEBOOK = "mixture_of_experts"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %% [markdown]
# ## Claims, registered
# What each verdict row tests, in one place: the notes' claim (in our words, with its file), the
# measure, the criterion and why, the interval's level, n (and the power calculation behind n where
# there is one). `ablation.save_results` refuses comparisons judged otherwise and stores these
# specs in results.json; a test fails when they differ from the specs of the committed results, so
# a changed criterion means a rerun. A criterion changed after a run's numbers were seen keeps the
# change in its `history`, and the gallery calls its row exploratory until it is rerun on new data.
# A `check` is an identity or a property of the probe's construction: shown, never a verdict.

# %%
REGISTERED = ablation.REGISTERED_AFTER_FULL_RUN
claim = lambda name, **kw: ablation.Claim(
    name, **{"notes": "002_aa3d7b0c5341285e.txt", "n": 3, "history": (REGISTERED,), **kw}
)
# the pilot: DeepSeekMoE - GShard top-2 on seeds 0-2 of the FULL run of 2026-12-03 (-0.004, +0.033, -0.013)
# registered at alpha 0.05 (a one-sided test at 90%) while the verdict reads a two-sided 95% interval
# (0.025 per side): the gallery labels the row underpowered (`ablation.Claim.underpowered`)
FINE_POWER = ablation.Power(
    sd=0.0243,
    effect=0.025,
    alpha=0.05,
    pilot="the FULL run of 2026-12-03, DeepSeekMoE - GShard top-2 (paired sd over seeds 0-2)",
)
FRESH_FIRST = 3  # the first seed nobody has seen: the committed run used 0-2
CLAIMS = ablation.register(
    claim(
        "At equal active parameters MoE beats dense in the same steps",
        lines=(134, 136),
        says="MoE lets only some of its experts compute for each token, which cuts the compute while the model "
        "keeps its expressive power, and adding experts grows its capacity and so its performance on complex tasks",
        measure="final validation loss, GShard top-2 minus dense, paired by seed (the other MoE arms shown)",
        criteria=(ablation.Criterion("less"),),
        why="a direction; GShard top-2 is the arm tested, fixed before the run",
    ),
    claim(
        "Fine-grained + shared experts beat coarse top-2 at the same compute",
        lines=(124, 130),
        says="DeepSeekMoE has more, smaller experts per layer, selects more of them per token and isolates shared "
        "experts that serve every token; combining fine-grained and shared experts keeps the total compute "
        "constant while raising the model's specialisation",
        measure="final validation loss, DeepSeekMoE minus GShard top-2 (the same balance loss and 512 active hidden "
        "units; each at the LR its committed dev sweep picked), paired by seed, on fresh seeds 3-10",
        criteria=(ablation.Criterion("less"),),
        why="the notes claim a gain at constant compute, not parity, so a direction. n is sized to find a gain of "
        "0.025 nats with power 0.8: half the gain MoE itself showed over dense here (0.049 nats at equal active "
        "parameters), the step beyond MoE the notes present it as; a smaller gain is not one this budget looks "
        "for. Refuted (does not hold) if the whole interval lies above 0; inconclusive at this n says a gain of "
        "0.025 or more is unlikely",
        n=FINE_POWER.n(),
        power=FINE_POWER,
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-05",
                "was 'Fine-grained + shared experts do at least as well as coarse top-2', DeepSeekMoE - GShard "
                "below 0 + 0.01 nats (90%, n=3); now below 0 (95%), n sized for 0.025 nats",
                "the notes (lines 124-130) claim a gain at the same compute, not parity; and at n=3 with a paired "
                "sd of 0.0243 the 0.01 margin needed 53 seeds: 'holds' was out of reach (issue 39)",
                seen="2026-12-03",
            ),
            ablation.Revision(
                "2026-12-05",
                f"judged on fresh seeds {FRESH_FIRST}-{FRESH_FIRST + FINE_POWER.n() - 1}, each arm at its committed "
                "learning rate (no sweep rerun)",
                "seeds 0-2 were seen; the same seeds would reproduce the same numbers",
                fresh=True,
                seeds=tuple(range(FRESH_FIRST, FRESH_FIRST + FINE_POWER.n())),
            ),
        ),
    ),
)
for c in CLAIMS:
    if c.power is not None:
        pw = c.power
        print(
            f"{c.name}: n = {pw.n()} seeds for sd {pw.sd} and effect {pw.effect} (power {pw.power}), registered n={c.n}"
        )

# %%
# FULL: validation every 500 steps (the dots of the loss plot; each pass over the whole validation
# split costs as much as 20-40 training steps)
dense = ablation.shakespeare_config(
    NOTEBOOK, steps=STEPS, **ablation.pick(smoke={}, full={"eval": {"every": STEPS // 4}})
)
F = dense.model.dims.d_ff


def moe(**kw) -> object:
    return dataclasses.replace(dense, model=dataclasses.replace(dense.model, moe=MoEConfig(**kw)))


switch = BalanceLossConfig(loss="switch", coef=0.01)  # the one balance loss of every balanced arm
configs = {
    "dense": dense,
    "switch top-1": moe(n_experts=8, top_k=1, d_expert=F, balance=switch),
    "gshard top-2": moe(n_experts=8, top_k=2, d_expert=F // 2, router=SoftmaxRouter(renormalize=True), balance=switch),
    "deepseekmoe": moe(n_experts=8, top_k=2, d_expert=F // 2, segments=4, n_shared=1, balance=switch),
    "gshard, no balancing": moe(
        n_experts=8, top_k=2, d_expert=F // 2, router=SoftmaxRouter(renormalize=True), balance=None
    ),
    "gshard, loss-free bias": moe(
        n_experts=8,
        top_k=2,
        d_expert=F // 2,
        router=SoftmaxRouter(renormalize=True, bias_update_rate=1e-3),
        balance=None,
    ),
}
TUNED = ("dense", "switch top-1", "gshard top-2", "deepseekmoe")
GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
sweeps = {name: ablation.sweep_lr(configs[name], name, GRID, NOTEBOOK) for name in TUNED}
for name, sweep in sweeps.items():
    edge = " (at the edge of the grid)" if sweep["at_edge"] else ""
    print(f"{name:14s} lr {sweep['lr']:.3g}{edge}; dev loss by lr:", [round(v, 4) for v in sweep["dev_loss"]])
lr_of = {name: sweeps[name if name in sweeps else "gshard top-2"]["lr"] for name in configs}
configs = {name: ablation.with_lr(cfg, lr_of[name]) for name, cfg in configs.items()}
active = {
    n: (m.routed_k + m.n_shared) * (m.d_expert // m.segments) if (m := c.model.moe) else F for n, c in configs.items()
}
assert len(set(active.values())) == 1, f"active hidden units per token differ: {active}"


def last_load(workdir: str) -> list:
    """Share of the routed assignments per expert at the last logged step, [layers][experts]."""
    recs = [r for r in read_metrics(workdir) if "train/aux_metrics/moe_load" in r]
    return recs[-1]["train/aux_metrics/moe_load"] if recs else []


curves = {
    (name, seed): ablation.run_arm(
        cfg, name, seed, NOTEBOOK, measure=(lambda c: {"load": last_load(c.workdir)}) if cfg.model.moe else None
    )
    for name, cfg in configs.items()
    for seed in SEEDS
}
# claim 2 on fresh seeds, pair by pair (a sitting that stops midway leaves whole pairs committed)
FRESH = ablation.seeds(full=FINE_POWER.n(), first=FRESH_FIRST)
FINE = ("gshard top-2", "deepseekmoe")
fresh_curves = {(name, seed): ablation.run_arm(configs[name], name, seed, NOTEBOOK) for seed in FRESH for name in FINE}
ceiling = math.log(dense.model.dims.vocab_size)

# %% [markdown]
# ## Loss against tokens

# %%
tokens_per_step = dense.train.batch_size * dense.data.seq_len
fig_loss, ax = plt.subplots(figsize=(8, 4.5))
for i, name in enumerate(("dense", "switch top-1", "gshard top-2", "deepseekmoe")):
    for seed in SEEDS:
        c = curves[name, seed]
        label = f"{name} ({c.summary.get('params', 0):,} params)" if seed == SEEDS[0] else None
        ax.plot(np.array(c.steps) * tokens_per_step, c.train_loss, color=f"C{i}", alpha=0.7, label=label)
        ax.plot(np.array(c.val_steps) * tokens_per_step, c.val_loss, "o", color=f"C{i}")
ax.set(
    xlabel="training tokens",
    ylabel="loss (nats/char): lines train, dots validation",
    title="Dense vs MoE at equal active parameters (one line per seed)",
)
ax.legend(fontsize=8)
plt.show()
final = {name: [curves[name, seed].final_or(ceiling) for seed in SEEDS] for name in configs}
fresh_final = {name: [fresh_curves[name, seed].final_or(ceiling) for seed in FRESH] for name in FINE}
print("seeds", SEEDS, {k: ablation.mean_text(v, 4) for k, v in final.items()})
print("fresh seeds", FRESH, {k: ablation.mean_text(v, 4) for k, v in fresh_final.items()})

# %% [markdown]
# ## Fine-grained + shared experts against coarse top-2, on the fresh seeds
# Final validation loss of each fresh seed, the two arms joined by seed (claim 2 is judged on these).

# %%
fig_fresh, ax = plt.subplots(figsize=(6, 4))
for gs, ds in zip(fresh_final["gshard top-2"], fresh_final["deepseekmoe"]):
    ax.plot([0, 1], [gs, ds], "o-", color="C2" if ds < gs else "C3", alpha=0.7)
ax.set(
    xticks=[0, 1],
    xticklabels=FINE,
    xlim=(-0.3, 1.3),
    ylabel="final validation loss (nats/char)",
    title=f"Fresh seeds {FRESH[0]}-{FRESH[-1]}: green where DeepSeekMoE is lower",
)
plt.show()

# %% [markdown]
# ## Expert load (measured; the notes make no claim about it)
# Share of the routed assignments per expert at the last logged step, per layer, and the largest
# expert's share over the mean (1 = even), seeds 0-2.


# %%
balance_runs = ("gshard top-2", "gshard, no balancing", "gshard, loss-free bias")


def load_of(c: ablation.Curves) -> np.ndarray:
    """The run's last logged load [layers, experts]; NaN for a run that diverged before measuring."""
    load = (c.summary["measured"] or {}).get("load")
    return (
        np.asarray(load, dtype=float)
        if load
        else np.full((dense.model.dims.n_layers, configs["gshard top-2"].model.moe.n_experts), np.nan)
    )


loads = {(name, seed): load_of(curves[name, seed]) for name in balance_runs for seed in SEEDS}
max_over_mean = {
    name: [float(np.max(np.max(loads[name, s], axis=1) / np.mean(loads[name, s], axis=1))) for s in SEEDS]
    for name in balance_runs
}
fig_load, axes = plt.subplots(1, len(balance_runs), figsize=(15, 3.8), sharey=True)
for ax, name in zip(axes, balance_runs):
    load = loads[name, SEEDS[0]]
    width = 0.8 / load.shape[0]
    for layer in range(load.shape[0]):
        ax.bar(np.arange(load.shape[1]) + layer * width, load[layer], width=width, label=f"layer {layer}")
    ax.axhline(1 / load.shape[1], color="k", ls=":")
    ax.set(title=f"{name} (seed {SEEDS[0]})\nmax/mean {ablation.mean_text(max_over_mean[name], 2)}", xlabel="expert")
axes[0].set_ylabel("share of assignments")
axes[0].legend(fontsize=7)
plt.show()
load_table = {
    **{f"max/mean load, {name}": ablation.mean_text(v, 2) for name, v in max_over_mean.items()},
    "no balancing over the balance loss": ablation.mean_text(
        np.divide(max_over_mean["gshard, no balancing"], max_over_mean["gshard top-2"]), 2
    ),
}
print("| expert load (seeds 0-2, mean +- 95% half-width) | |\n| --- | --- |")
print("\n".join(f"| {k} | {v} |" for k, v in load_table.items()))

# %% [markdown]
# ## Verdict
# Differences paired by seed, criteria registered in `CLAIMS` before the run: the MoE arm tested
# against dense is GShard top-2 (the others are shown, not picked after the fact); DeepSeekMoE
# against GShard top-2 on the fresh seeds only.

# %%
claims = {
    "At equal active parameters MoE beats dense in the same steps": (
        f"val loss dense {ablation.mean_text(final['dense'])}; switch {ablation.mean_text(final['switch top-1'])}, "
        f"deepseekmoe {ablation.mean_text(final['deepseekmoe'])}; gshard - dense",
        [ablation.paired(final["gshard top-2"], final["dense"], expect="less")],
    ),
    "Fine-grained + shared experts beat coarse top-2 at the same compute": (
        f"val loss on fresh seeds {FRESH[0]}-{FRESH[-1]}, deepseekmoe - gshard (same balance loss)",
        [ablation.paired(fresh_final["deepseekmoe"], fresh_final["gshard top-2"], expect="less")],
    ),
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
arm = lambda seeds, values, extra=None: ablation.arm_record(
    {
        s: {"final_val": v, **({"max_over_mean": extra[i]} if extra else {})}
        for i, (s, v) in enumerate(zip(seeds, values))
    }
)
out = ablation.save_results(
    NOTEBOOK,
    {
        "arms": {name: arm(SEEDS, final[name], max_over_mean.get(name)) for name in configs},
        "fresh_arms": {name: arm(FRESH, fresh_final[name]) for name in FINE},
        "load_balance": {"max_over_mean": max_over_mean, "table": load_table},
        "loads": {f"{name} s{seed}": load for (name, seed), load in loads.items()},
        "curves": {f"{name} s{seed}": c for (name, seed), c in {**curves, **fresh_curves}.items()},
        "lr_sweeps": sweeps,
        "verdicts": table,
    },
    figures={"loss": fig_loss, "load": fig_load, "fresh": fig_fresh},
    configs=configs,
    seeds=sorted({*SEEDS, *FRESH}),
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## What the notes claim, what was measured, where it sides
# Seeds 0-2 from the FULL run of 2026-12-03 (every tuned arm picked lr 3e-3 on the dev split). Val
# loss, mean +- the half-width of its 95% t interval (n=3; not an sd): dense 1.727 +- 0.008, switch
# 1.685 +- 0.032, GShard top-2 1.679 +- 0.035, DeepSeekMoE 1.684 +- 0.030.
# - **MoE against dense** (notes 002, lines 134-136: few experts compute per token, and more
#   experts add capacity that improves performance). GShard top-2 - dense: -0.049 [-0.092, -0.005]
#   nats at equal active parameters and steps: it **sides with the notes**, with three seeds and a
#   wide interval; Switch and DeepSeekMoE land as low. Character-level Shakespeare at 2,000 steps is
#   a small task, not the "complex tasks" the notes have in mind.
# - **DeepSeekMoE against coarse top-2** (lines 124-130: fine-grained plus shared experts keep the
#   compute constant and raise specialisation). The notes claim a gain at the same compute; the
#   loss is how a gain in specialisation would show in this notebook (specialisation itself is not
#   measured). Seeds 0-2 gave +0.005 [-0.036, +0.046] nats (90%), judged then against a 0.01-nat
#   parity margin that three seeds could not meet (53 needed). Those seeds were seen, so the claim
#   is registered anew as a gain (< 0, 95%) and judged on fresh seeds 3-10 only, n = 8 sized to
#   find 0.025 nats with power 0.8 from that run's paired sd (0.0243); it would have sided against
#   the notes with the interval above 0. FULL rerun of 2026-12-05: GShard top-2 1.698 +- 0.013,
#   DeepSeekMoE 1.684 +- 0.011; DeepSeekMoE - GShard **-0.015 [-0.028, -0.001]** nats (n=8,
#   lower on 6 of 8 seeds): it **sides with the notes**, by a gain smaller than the 0.025 the n was
#   sized for and an interval that just clears 0 (the paired sd, 0.016, came out below the pilot's).
#   The n was sized at a one-sided alpha of 0.05 while the verdict reads a two-sided 95% interval
#   (0.025 per side): there 8 seeds had power 0.70 and 10 were needed, so the gallery labels the
#   row *underpowered* (found 2026-12-06); its "holds" stands, a stricter test having been met.
# - **Expert load** (not in the notes, so a table, not a verdict): without balancing the max/mean
#   expert load is 2.4x [1.7, 3.2] the balanced run's; the loss-free bias brings it to 1.20
#   [1.01, 1.39] with no auxiliary loss. Unbalanced routing did not cost loss here (GShard without
#   balancing 1.677 +- 0.038, with the bias 1.685 +- 0.020): load balance matters for throughput
#   under expert parallelism more than for quality at this scale.
