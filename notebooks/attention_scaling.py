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
# # Why attention divides by sqrt(d_k)
#
# **What the notes claim** (notes 004, lines 25-27, answering why QK^T is divided by sqrt(d_k)): the
# factor is there to keep the variance stable; without it the dot products grow large when the
# dimension is large, so the softmax receives large inputs and its gradient becomes small.
# (Vaswani et al. 2017, sec. 3.2.1: with q and k of independent unit-variance entries, q.k has
# variance d_k.)
#
# **What is measured.** A character-level model is trained both ways at two head sizes d_k (16 and
# 64, the same head count), from an init whose q and k have unit-variance entries, the notes'
# setting. In every run, at initialisation and after training, a probe
# (`ablation.probes.attention_stats`) reads each layer's attention on a validation batch: q, k and v
# from the layer's own projections, the logits' std, the mean largest softmax weight, and the
# softmax Jacobian's norm, the weights checked against the library's attention op. Training can
# undo what init sets up (the model may shrink its q and k), so the rows after training are the
# test of the claim; the final validation losses test whether training suffers. Seeds pair the
# scaled and unscaled arms (same init, same data order); each verdict comes from a 95% interval over
# seeds (90% for a claim of equality, with the margin registered below before the run).
# `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, 2 seeds, and its verdicts decide nothing.

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
from transformer_jax.models import InitConfig, SoftmaxAttention, with_changes

NOTEBOOK = "attention_scaling"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %% [markdown]
# ## Claims, registered
# What each verdict row tests, in one place: the notes' claim (in our words, with its file and
# lines), the measure, the criterion and why, what result would refute it, the interval's level and
# n. `ablation.save_results` refuses comparisons judged otherwise and stores these specs in
# results.json; a test fails when they differ from the specs of the committed results, so a changed
# criterion means a rerun. A `check` confirms the setting (shown, never a verdict). The probe rows
# were registered before the FULL run that judges them; the two training rows keep the criteria of
# the earlier run. All rows: the d_k=64 and d_k=16 arms, n = 3 seeds (no pilot sized it; the
# intervals show what 3 seeds resolve). "Mean over layers": each run's per-layer values averaged.

# %%
NOTES, LINES = "004_0c7acc088a14ef8a.txt", (25, 27)
BEFORE = ablation.Revision(
    "2026-12-05", "registered", "before the FULL run that judges it: the probe reads the trained d_k runs (issue 39)"
)
claim = lambda name, history=(BEFORE,), **kw: ablation.Claim(
    name, **{"notes": NOTES, "lines": LINES, "n": 3, "history": history, **kw}
)
LN_SQRT2, LN_1_25 = 0.3466, 0.2231  # ln sqrt(2), ln 1.25 (the margins below)
CLAIMS = ablation.register(
    claim(
        "At init the unscaled logits have std ~ sqrt(d_k)",
        says="(the notes' premise) q and k with unit-variance entries give q.k a variance of d_k",
        measure="ln(unscaled logit std / sqrt(d_k)) at init, mean over layers, per d_k",
        criteria=(ablation.Criterion("equal", 0.0, LN_1_25),),
        why="the init (std d_model^-1/2 on a normalised input) is chosen to give unit-variance q and k: a "
        "check that the runs start where the notes' argument starts, within a factor 1.25",
        check=True,
        lines=None,
    ),
    claim(
        "Without the factor the logits grow with d_k",
        says="without dividing by sqrt(d_k), the dot products become large when the dimension is large",
        measure="ln(logit std at d_k=64 / at d_k=16), unscaled arm after training, mean over layers, paired by seed",
        criteria=(ablation.Criterion("greater"),),
        why="a direction (the variance argument predicts +ln 2). Refuted by a ratio at or below 1: training "
        "shrinks q and k at the larger head size and undoes the growth, so the factor is not needed for it",
    ),
    claim(
        "With the factor the logit scale stays put as d_k grows",
        says="dividing by sqrt(d_k) keeps the variance of the logits stable",
        measure="ln(logit std at d_k=64 / at d_k=16), scaled arm after training, mean over layers, paired by seed",
        criteria=(ablation.Criterion("equal", 0.0, LN_SQRT2),),
        why="margin ln sqrt(2), half the ln 2 growth predicted without the factor: 'stable' means closer to "
        "no growth than to half of it. Refuted by a trained scaled model whose logit std moves more than that",
    ),
    claim(
        "Without the factor the softmax saturates",
        says="without the factor the softmax inputs are large (so its weights pile onto one key)",
        measure="mean largest softmax weight at d_k=64, unscaled minus scaled, paired by seed (at init; trained)",
        criteria=(ablation.Criterion("greater"),),
        why="a direction. Refuted (trained) by an unscaled model no more peaked than the scaled one: both "
        "learn the same attention and the factor makes no difference to it",
    ),
    claim(
        "... and the softmax gradient is small",
        says="with large softmax inputs the gradient becomes small",
        measure="ln(softmax Jacobian norm, unscaled / scaled) at d_k=64, mean over rows and layers, paired by "
        "seed (at init; trained)",
        criteria=(ablation.Criterion("less"),),
        why="a direction. Refuted by an unscaled Jacobian as large as the scaled one or larger: a half-"
        "saturated softmax can pass more gradient than a flat one over many keys (||J||^2 = 1/n - 1/n^2)",
    ),
    claim(
        "Training without the factor ends worse at",
        says="the small gradients of a saturated softmax make training harder",
        measure="final validation loss, unscaled minus scaled, paired by seed, per d_k",
        criteria=(ablation.Criterion("greater"),),
        why="a direction: any loss difference above zero beyond the seed noise",
        history=(ablation.REGISTERED_AFTER_FULL_RUN,),
    ),
    claim(
        "... and more so at larger d_k",
        says="the dot products, and so the harm, grow with the dimension",
        measure="the unscaled-minus-scaled gap at the largest d_k minus the gap at the smallest",
        criteria=(ablation.Criterion("greater"),),
        why="a direction",
        history=(ablation.REGISTERED_AFTER_FULL_RUN,),
    ),
)

# %% [markdown]
# ## Training with and without the factor, probed at init and after training
# The character-level Shakespeare model (4 layers, d_model 128, Pre-LN) with the head count fixed
# at 4 and the head size d_k varied through `model.dims.head_dim` (16 and 64), so that only d_k changes;
# the unscaled arm sets `model.attention.scale=1.0`. The claim's own setting: every weight starts
# with std 1/sqrt(d_model) (`model.init.std`), so q and k have unit-variance entries at init
# (their input is normalised) and the unscaled logits q.k start with std ~sqrt(d_k). Each arm's
# learning rate is the best of 1/3, 1 and 3 x 1e-3 (AdamW with warmup; the grid grows by 3x past an
# edge that wins, up to twice) on a dev split carved from the end of the training text (one seed,
# `ablation.sweep_lr`), so the unscaled arm is not judged at a rate chosen for the scaled one; a
# run that diverges counts as the uniform predictor, ln V nats. After each run, the `measure`
# callback probes the model its config builds with the run's seed (the init training started from)
# and the last checkpoint, on the first validation batch; the numbers are kept in the run's summary
# under `experiments/results/attention_scaling/runs/`.

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
ceiling = math.log(base.model.dims.vocab_size)
HEADS = base.model.dims.n_heads
HEAD_DIMS = ablation.pick(smoke=[8, 32], full=[16, 64])
GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
configs, curves, final, measured, sweeps = {}, {}, {}, {}, {}
probe = lambda c: ablation.probes.trained_attention_stats(c.workdir)
for d_k in HEAD_DIMS[::-1]:  # the largest first: the probe rows compare the arms there
    for scaled in (True, False):
        name = f"d_k={d_k} {'scaled' if scaled else 'unscaled'}"
        model = with_changes(
            base.model,
            head_dim=d_k,
            init=InitConfig(scheme="normal", std=base.model.dims.d_model**-0.5),
            attention=SoftmaxAttention(scale=None if scaled else 1.0),
        )
        sweeps[name] = ablation.sweep_lr(dataclasses.replace(base, model=model), name, GRID, NOTEBOOK)
        configs[name] = ablation.with_lr(dataclasses.replace(base, model=model), sweeps[name]["lr"])
        for seed in SEEDS:
            curves[f"{name} s{seed}"] = ablation.run_arm(configs[name], name, seed, NOTEBOOK, measure=probe)
        final[name] = [curves[f"{name} s{seed}"].final_or(ceiling) for seed in SEEDS]
        measured[name] = {seed: curves[f"{name} s{seed}"].summary["measured"] for seed in SEEDS}
for name, sweep in sweeps.items():
    edge = " (at the edge of the grid)" if sweep["at_edge"] else ""
    print(f"{name:18s} lr {sweep['lr']:.3g}{edge}; dev loss by lr:", [round(v, 4) for v in sweep["dev_loss"]])
layer_mean = lambda name, when, key: [np.mean((measured[name][s] or {}).get(when, {}).get(key, np.nan)) for s in SEEDS]
print(f"{HEADS} heads; mean over layers and seeds (init -> trained):")
KEYS = ("logit_std", "max_weight", "jacobian")
for name in sorted(measured):
    print(
        f"  {name:18s}",
        {k: [round(float(np.mean(layer_mean(name, w, k))), 3) for w in ("init", "trained")] for k in KEYS},
    )

fig_probe, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for ax, key in zip(axes, KEYS):
    for i, arm in enumerate(("scaled", "unscaled")):
        for when, ls in (("init", ":"), ("trained", "-")):
            y = [np.mean(layer_mean(f"d_k={d} {arm}", when, key)) for d in HEAD_DIMS]
            ax.plot(HEAD_DIMS, y, "o", ls=ls, color=f"C{i}", label=f"{arm}, {when}")
    ax.set(xlabel="d_k", xticks=HEAD_DIMS)
axes[0].set(yscale="log", ylabel="std of the attention logits", title="Logit scale")
axes[1].set(ylabel="mean largest softmax weight", title="Saturation")
axes[2].set(yscale="log", ylabel="mean ||diag(p) - p p^T||_F", title="Softmax Jacobian")
axes[0].legend(fontsize=8)
fig_probe.tight_layout()
plt.show()

fig_train, ax = plt.subplots(figsize=(7, 4))
for i, name in enumerate(sorted(configs)):
    for seed in SEEDS:
        c = curves[f"{name} s{seed}"]
        ls = "--" if "unscaled" in name else "-"
        label = f"{name} (train)" if seed == SEEDS[0] else None
        ax.plot(c.steps, c.train_loss, ls=ls, color=f"C{i}", alpha=0.7, label=label)
ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="Training with and without 1/sqrt(d_k)")
ax.legend()
plt.show()
print({k: ablation.mean_text(v) for k, v in final.items()})

# %% [markdown]
# ## Verdict
# The criteria are those registered above; "mean over layers" averages each run's four layers first,
# so n is the number of seeds. How to read the rows against the notes: "holds" sides with them,
# "does not hold" goes against them. The at-init rows test the notes' mechanism where their premise
# is set up (unit-variance q and k, the check row); the trained rows test whether it survives
# training, which is free to shrink q and k in the unscaled arm (logits that stop growing with d_k,
# a softmax no more peaked than the scaled one) and so to make the factor unnecessary. The Jacobian
# rows can go against the notes even where the softmax does saturate: a softmax spread over n keys
# has a small Jacobian too (||J||^2 = 1/n - 1/n^2), so "saturated" and "small gradient" are two
# claims, not one. The training rows ask whether the end result suffers.
#
# **What the FULL run found** (2026-12-05, 3 seeds; the table below and `results.json`): with the
# notes' premise in place at init (unscaled logit std 4.0 and 8.0 at d_k 16 and 64, within 1% of
# sqrt(d_k)), the unscaled softmax is already more peaked (largest weight 0.79 vs 0.16 at d_k=64) and
# its Jacobian smaller (0.21 vs 0.24), both siding with the notes. After training the gap widens:
# unscaled 0.95 vs 0.60 and a Jacobian a quarter of the scaled one (0.07 vs 0.27), and the unscaled
# arm ends 0.55 nats worse at d_k=64 (0.12 at d_k=16, inconclusive). Against the notes' picture of
# *why*: training does not keep the unscaled logits growing with d_k. Both unscaled arms blow their
# logits up (std 107 at d_k=16, 44 at d_k=64; each arm at its own tuned rate, 9e-3 and 1e-3, which is
# a confound of this row), and the scaled arm's logits grow too (std 2.7 and 3.8, a ratio of 1.43 with
# an interval straddling the sqrt(2) margin: inconclusive). So the saturation the notes describe is
# there and worsens with training, but it is not set by the sqrt(d_k) variance argument once the
# model has trained.

# %%
margin = {c.name: c.criteria[0].margin for c in CLAIMS}  # as registered
STAYS = "With the factor the logit scale stays put as d_k grows"
stat = lambda name, when, key: np.asarray(
    [np.mean((measured[name][s] or {}).get(when, {}).get(key, np.nan)) for s in SEEDS], float
)
dks = sorted({int(name.split()[0].split("=")[1]) for name in final})
small, big = f"d_k={dks[0]}", f"d_k={dks[-1]}"
growth = lambda arm: np.log(
    stat(f"{big} {arm}", "trained", "logit_std") / stat(f"{small} {arm}", "trained", "logit_std")
)
gaps = {f"d_k={d}": np.subtract(final[f"d_k={d} unscaled"], final[f"d_k={d} scaled"]) for d in dks}
claims = {}
for d in dks:
    claims[f"At init the unscaled logits have std ~ sqrt(d_k) (d_k={d})"] = (
        "ln(unscaled logit std / sqrt(d_k)) at init",
        [
            ablation.paired(
                np.log(stat(f"d_k={d} unscaled", "init", "logit_std") / math.sqrt(d)),
                expect="equal",
                margin=margin["At init the unscaled logits have std ~ sqrt(d_k)"],
            )
        ],
    )
one_size = ablation.Comparison.unmeasured("greater", "one head size only")
claims["Without the factor the logits grow with d_k (trained)"] = (
    f"ln(logit std at {big} / at {small}), unscaled, trained",
    [ablation.paired(growth("unscaled"), expect="greater") if big != small else one_size],
)
claims[f"{STAYS} (trained)"] = (
    f"ln(logit std at {big} / at {small}), scaled, trained",
    [
        ablation.paired(growth("scaled"), expect="equal", margin=margin[STAYS])
        if big != small
        else ablation.Comparison.unmeasured("equal", "one head size only", margin=margin[STAYS])
    ],
)
for when in ("init", "trained"):
    un, sc = f"{big} unscaled", f"{big} scaled"
    claims[f"Without the factor the softmax saturates ({when})"] = (
        f"mean largest weight at {big}, unscaled - scaled ({np.mean(stat(un, when, 'max_weight')):.3f} vs "
        f"{np.mean(stat(sc, when, 'max_weight')):.3f})",
        [ablation.paired(stat(un, when, "max_weight"), stat(sc, when, "max_weight"), expect="greater")],
    )
    claims[f"... and the softmax gradient is small ({when})"] = (
        f"ln(Jacobian norm, unscaled / scaled) at {big} ({np.mean(stat(un, when, 'jacobian')):.3f} vs "
        f"{np.mean(stat(sc, when, 'jacobian')):.3f})",
        [ablation.paired(np.log(stat(un, when, "jacobian") / stat(sc, when, "jacobian")), expect="less")],
    )
for k in (small, big) if big != small else (small,):
    claims[f"Training without the factor ends worse at {k}"] = (
        "final val loss, unscaled - scaled",
        [ablation.paired(gaps[k], expect="greater")],
    )
claims["... and more so at larger d_k"] = (
    f"gap at {big} - gap at {small}",
    [ablation.paired(gaps[big], gaps[small], expect="greater") if big != small else one_size],
)
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "attention": {name: {str(s): m for s, m in by_seed.items()} for name, by_seed in measured.items()},
        "arms": {
            name: ablation.arm_record({s: {"final_val": v} for s, v in zip(SEEDS, values)})
            for name, values in final.items()
        },
        "curves": curves,
        "lr_sweeps": sweeps,
        "verdicts": table,
    },
    figures={"probes": fig_probe, "training": fig_train},
    configs=configs,
    seeds=SEEDS,
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)
