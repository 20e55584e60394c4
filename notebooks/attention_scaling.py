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
# **Claims** (Vaswani et al. 2017, sec. 3.2.1, and the notes): if the entries of q and k are
# independent with mean 0 and variance 1, then q.k has variance d_k; without the 1/sqrt(d_k)
# factor the logits grow with the head size, the softmax saturates (one key takes almost all the
# weight) and its gradient vanishes, which slows or stalls training. With the factor the logit
# variance is 1 whatever d_k.
#
# Part 1 measures variance, saturation and gradient size with the library's attention op
# (`transformer_jax.ops.attention.attention`, `scale=1` vs the default `1/sqrt(d_k)`); part 2
# trains a character-level model both ways at two head sizes (the same head count), from an init
# whose q and k have unit-variance entries, as the claim assumes. Every number is measured over
# several seeds (probe draws in part 1; initialisation and data order in part 2, the scaled and
# unscaled arms paired by seed), and each verdict comes from a 95% interval over seeds (90% for a
# claim of equality, with a margin fixed before the run). `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, 2 seeds.

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
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models import InitConfig, SoftmaxAttention, build_model, with_changes
from transformer_jax.ops.attention import attention

NOTEBOOK = "attention_scaling"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
PROBE_SEEDS = ablation.seeds(full=5)
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
IDENTITY = "q and k are drawn iid N(0, 1) and the logits come from this notebook's einsum, not the library"
claim = lambda name, **kw: ablation.Claim(
    name, **{"notes": "004_0c7acc088a14ef8a.txt", "n": 3, "history": (REGISTERED,), **kw}
)
CLAIMS = ablation.register(
    claim(
        "Unscaled logits have variance ~ d_k; scaled ones ~ 1",
        says="dividing QK^T by sqrt(d_k) keeps the variance stable; without it dot products grow with d",
        measure="log-log slope of the unscaled logits' variance against d_k; largest |ln variance| when scaled",
        criteria=(ablation.Criterion("equal", 1.0, 0.1), ablation.Criterion("less", "ln 1.3")),
        why=f"an identity: {IDENTITY}, so Var = d_k by construction",
        n=5,
        check=True,
    ),
    claim(
        "Without scaling the softmax saturates as d_k grows",
        says="large dot products make the softmax inputs large",
        measure="mean largest softmax weight at the largest d_k, unscaled then scaled",
        criteria=(ablation.Criterion("greater", 0.8), ablation.Criterion("less", 0.5)),
        why=f"follows by construction: {IDENTITY}; logits of std sqrt(d_k) saturate any softmax",
        n=5,
        check=True,
    ),
    claim(
        "... and the gradient through the softmax vanishes",
        says="a softmax with large inputs has small gradients",
        measure="softmax Jacobian norm at the largest d_k unscaled, over the smaller of two references",
        criteria=(ablation.Criterion("less", 0.5),),
        why=f"follows by construction: {IDENTITY}; the gradient reaching q through the library grows",
        n=5,
        check=True,
    ),
    claim(
        "Training without the factor ends worse at",
        says="without the factor the softmax saturates and the gradients are small, so training suffers",
        measure="final validation loss, unscaled minus scaled, paired by seed, per d_k",
        criteria=(ablation.Criterion("greater"),),
        why="a direction: any loss difference above zero beyond the seed noise",
    ),
    claim(
        "... and more so at larger d_k",
        says="the variance, and so the harm, grows with d_k",
        measure="the unscaled-minus-scaled gap at the largest d_k minus the gap at the smallest",
        criteria=(ablation.Criterion("greater"),),
        why="a direction",
    ),
)

# %% [markdown]
# ## Part 1: logits, saturation and gradients against d_k
# Random q, k, v with unit-variance entries, one query over S = 64 keys, N samples per draw; one
# draw per probe seed.

# %%
DKS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048]
S, N = 64, ablation.pick(smoke=32, full=512)


def probe(d_k: int, scale: float | None, seed: int = 0) -> dict:
    kq, kk, kv, kg = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (N, 1, 1, d_k))
    k = jax.random.normal(kk, (N, S, 1, d_k))
    v = jax.random.normal(kv, (N, S, 1, d_k))
    g = jax.random.normal(kg, (N, 1, 1, d_k))
    s = 1 / np.sqrt(d_k) if scale is None else scale
    logits = s * jnp.einsum("nd,nsd->ns", q[:, 0, 0], k[:, :, 0])
    p = jax.nn.softmax(logits, axis=-1)
    # The softmax Jacobian d p / d logits (diag(p) - p p^T): what multiplies every gradient.
    jac = jax.vmap(jax.jacfwd(jax.nn.softmax))(logits)
    # Gradient of <g, attention(q, k, v)> with respect to the query, per sample.
    grad_q = jax.grad(lambda q: jnp.sum(g * attention(q, k, v, scale=scale)))(q)
    return {
        "logit_var": float(jnp.var(logits)),
        "max_weight": float(jnp.mean(jnp.max(p, axis=-1))),
        "entropy": float(jnp.mean(-jnp.sum(p * jnp.log(p + 1e-30), axis=-1))),
        "softmax_jacobian": float(jnp.mean(jnp.linalg.norm(jac, axis=(-2, -1)))),
        "grad_q_norm": float(jnp.mean(jnp.linalg.norm(grad_q.reshape(N, -1), axis=-1))),
    }


SCALINGS = {"scaled 1/sqrt(d_k)": None, "unscaled": 1.0}
probes = {name: [[probe(d, scale, seed) for d in DKS] for seed in PROBE_SEEDS] for name, scale in SCALINGS.items()}
fig_probe, axes = plt.subplots(1, 4, figsize=(18, 3.8))
for name, by_seed in probes.items():
    mean = lambda key, by_seed=by_seed: [np.mean([rows[i][key] for rows in by_seed]) for i in range(len(DKS))]
    axes[0].loglog(DKS, mean("logit_var"), "o-", label=name)
    axes[1].semilogx(DKS, mean("max_weight"), "o-", label=name)
    axes[2].loglog(DKS, mean("softmax_jacobian"), "o-", label=name)
    axes[3].loglog(DKS, mean("grad_q_norm"), "o-", label=name)
axes[0].loglog(DKS, DKS, "k:", label="d_k (theory, unscaled)")
axes[0].set(xlabel="d_k", ylabel="variance of the logits", title="Logit variance")
axes[1].axhline(1 / S, color="k", ls=":", label="uniform 1/S")
axes[1].set(xlabel="d_k", ylabel="mean largest attention weight", title="Softmax saturation")
axes[2].set(xlabel="d_k", ylabel="mean ||diag(p) - p p^T||_F", title="Softmax Jacobian")
axes[3].set(xlabel="d_k", ylabel="mean |d out / d q|", title="Gradient reaching the query")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Part 2: training with and without the factor
# The character-level Shakespeare model (4 layers, d_model 128, Pre-LN) with the head count fixed
# at 4 and the head size d_k varied through `model.dims.head_dim` (16 and 64), so that only d_k changes;
# the unscaled arm sets `model.attention.scale=1.0`. The claim's own setting: every weight starts
# with std 1/sqrt(d_model) (`model.init.std`), so q and k have unit-variance entries at init
# (their input is normalised) and the unscaled logits q.k start with std ~sqrt(d_k), where the
# softmax saturates; the probe below reads them from each model at init. Each arm's learning rate
# is the best of 1/3, 1 and 3 x 1e-3 (AdamW with warmup; the grid grows by 3x past an edge that
# wins, up to twice) on a dev split carved from the end of the training text (one seed,
# `ablation.sweep_lr`), so the unscaled arm is not judged at a rate chosen for the scaled one; a
# run that diverges counts as the uniform predictor, ln V nats. Every run's summary is kept under
# `experiments/results/attention_scaling/runs/`.

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
ceiling = math.log(base.model.dims.vocab_size)
HEADS = base.model.dims.n_heads
HEAD_DIMS = ablation.pick(smoke=[8, 32], full=[16, 64])
GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
configs, curves, final, at_init, sweeps = {}, {}, {}, {}, {}
tokens = jax.random.randint(jax.random.key(0), (8, base.data.seq_len), 0, base.model.dims.vocab_size)
for d_k in HEAD_DIMS:
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
        probe_model = build_model(with_changes(model, scan_layers=False), seed=0)
        at_init[name] = ablation.probes.attention_logits(probe_model, tokens)
        for seed in SEEDS:
            curves[f"{name} s{seed}"] = ablation.run_arm(configs[name], name, seed, NOTEBOOK)
        final[name] = [curves[f"{name} s{seed}"].final_or(ceiling) for seed in SEEDS]
for name, sweep in sweeps.items():
    edge = " (at the edge of the grid)" if sweep["at_edge"] else ""
    print(f"{name:18s} lr {sweep['lr']:.3g}{edge}; dev loss by lr:", [round(v, 4) for v in sweep["dev_loss"]])
print(f"{HEADS} heads; first layer at init (seed 0):")
for name, stats in at_init.items():
    print(f"  {name:18s}", {k: round(v, 3) for k, v in stats.items()})

fig_train, ax = plt.subplots(figsize=(7, 4))
for i, name in enumerate(configs):
    for seed in SEEDS:
        c = curves[f"{name} s{seed}"]
        ls = "--" if "unscaled" in name else "-"
        ax.plot(
            c.steps,
            c.train_loss,
            ls=ls,
            color=f"C{i}",
            alpha=0.7,
            label=f"{name} (train)" if seed == SEEDS[0] else None,
        )
ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="Training with and without 1/sqrt(d_k)")
ax.legend()
plt.show()
print({k: ablation.mean_text(v) for k, v in final.items()})

# %% [markdown]
# ## Verdict
# Margins and thresholds fixed before the run: the unscaled log-log slope of the logit variance
# equals 1 within +-0.1; every scaled variance lies within a factor 1.3 of 1; "saturated" means a
# mean largest weight above 0.8 (scaled: below 0.5); "vanishes" means a softmax Jacobian below
# half of both the smallest d_k's and the scaled one's.

# %%
sc, un = probes["scaled 1/sqrt(d_k)"], probes["unscaled"]
per_seed = lambda rows_by_seed, f: [f(rows) for rows in rows_by_seed]
slopes = per_seed(un, lambda rows: np.polyfit(np.log(DKS), np.log([r["logit_var"] for r in rows]), 1)[0])
scaled_dev = per_seed(sc, lambda rows: max(abs(math.log(r["logit_var"])) for r in rows))
jac_ratio = [
    u[-1]["softmax_jacobian"] / min(u[0]["softmax_jacobian"], s[-1]["softmax_jacobian"]) for u, s in zip(un, sc)
]
gaps = {
    name.split()[0]: np.subtract(final[name], final[name.replace("unscaled", "scaled")])
    for name in final
    if name.endswith("unscaled")
}
by_dk = sorted(gaps, key=lambda k: int(k.split("=")[1]))
small, big = by_dk[0], by_dk[-1]
claims = {
    "Unscaled logits have variance ~ d_k; scaled ones ~ 1": (
        "log-log slope of the unscaled variance against d_k; largest |ln variance| of the scaled logits",
        [
            ablation.paired(slopes, expect="equal", reference=1.0, margin=0.1),
            ablation.paired(scaled_dev, expect="less", reference=math.log(1.3)),
        ],
    ),
    "Without scaling the softmax saturates as d_k grows": (
        f"mean largest weight at d_k={DKS[-1]}, unscaled then scaled",
        [
            ablation.paired([rows[-1]["max_weight"] for rows in un], expect="greater", reference=0.8),
            ablation.paired([rows[-1]["max_weight"] for rows in sc], expect="less", reference=0.5),
        ],
    ),
    "... and the gradient through the softmax vanishes": (
        f"softmax Jacobian norm at d_k={DKS[-1]} unscaled over the smaller of d_k={DKS[0]} unscaled and "
        f"d_k={DKS[-1]} scaled (the gradient reaching q still grows, "
        f"{np.mean([u[0]['grad_q_norm'] for u in un]):.3g} -> {np.mean([u[-1]['grad_q_norm'] for u in un]):.3g}, "
        "since the logits scale with |k|)",
        [ablation.paired(jac_ratio, expect="less", reference=0.5)],
    ),
}
for k in by_dk:
    claims[f"Training without the factor ends worse at {k}"] = (
        "final val loss, unscaled - scaled",
        [ablation.paired(gaps[k], expect="greater")],
    )
claims["... and more so at larger d_k"] = (
    f"gap at {big} - gap at {small}",
    [
        ablation.paired(gaps[big], gaps[small], expect="greater")
        if big != small
        else ablation.Comparison.unmeasured("greater", "one head size only")
    ],
)
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "probes": {
            name: [{"seed": s, "by_dk": rows} for s, rows in zip(PROBE_SEEDS, by_seed)]
            for name, by_seed in probes.items()
        },
        "dks": DKS,
        "unscaled_slope": {"seeds": list(PROBE_SEEDS), "values": slopes},
        "arms": {
            name: ablation.arm_record({s: {"final_val": v} for s, v in zip(SEEDS, values)})
            for name, values in final.items()
        },
        "curves": curves,
        "lr_sweeps": sweeps,
        "first_layer_at_init": at_init,
        "verdicts": table,
    },
    figures={"probes": fig_probe, "training": fig_train},
    configs=configs,
    seeds=SEEDS,
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)
