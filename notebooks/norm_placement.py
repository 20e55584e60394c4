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
# # Post-LN, Pre-LN and DeepNorm: warmup, optimizers and depth
#
# **Claims** (Xiong et al. 2020 "On Layer Normalization in the Transformer Architecture", Liu et
# al. 2020, Wang et al. 2022 "DeepNet", and the notes):
# 1. Post-LN without learning-rate warmup trains badly or diverges, more so as depth grows, and
#    warmup rescues it.
# 2. Pre-LN trains without warmup.
# 3. Post-LN, when it trains, can end lower than Pre-LN at shallow depth.
# 4. Adam is less hurt than SGD by Post-LN's vanishing gradients.
# 5. DeepNorm (x * alpha + F(x), then the norm; scaled init) trains deep Post-LN stably.
# 6. At initialisation, Post-LN's gradient shrinks towards the input (the notes: like 2^(-l/2)
#    over the l layers above), Pre-LN's is roughly flat across layers.
# 7. In Pre-LN each layer changes the residual stream less and less (||x_{l+1} - x_l|| / ||x_l||
#    falls with l): deep Pre-LN models act "wider rather than deeper".
#
# Character-level Shakespeare with a small width (d_model 64) at depths 6, 18 and 48, every arm
# with several seeds (initialisation and data order; arms paired by seed). Each verdict comes from
# a 95% interval over seeds (90% for "no worse", against a margin fixed before the run). All arms
# share one learning rate per optimizer (1e-3 Adam, 0.1 SGD): the warmup claims are about a fixed
# LR. `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, one depth, 2 seeds.

# %%
# On Colab: install your copy of transformer-jax first (it has no PyPI release). Name it in SOURCE:
# a git URL ("git+https://github.com/YOU/transformer-jax") or an uploaded wheel
# ("/content/transformer_jax-0.1.0-py3-none-any.whl"); add "[gpu]" for a GPU runtime, e.g.
# "transformer-jax[gpu] @ git+https://github.com/YOU/transformer-jax". TRANSFORMER_JAX_SOURCE also works.
import importlib.util
import os
import subprocess
import sys

if "google.colab" in sys.modules and importlib.util.find_spec("transformer_jax") is None:
    SOURCE = os.environ.get("TRANSFORMER_JAX_SOURCE", "")  # or write your copy's pip spec here
    if not SOURCE:
        raise SystemExit(
            "transformer-jax is not installed and has no PyPI release: set TRANSFORMER_JAX_SOURCE (or SOURCE "
            "in this cell) to a git URL or a wheel of your copy (see the comment above), then run the cell again"
        )
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", SOURCE], check=True)

# %%
import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models import build_model
from transformer_jax.train.metrics import read_metrics

NOTEBOOK = "norm_placement"
STEPS = ablation.pick(smoke=10, full=1500)
SEEDS = ablation.seeds()
DEPTHS = ablation.pick(smoke=(2,), full=(6, 18, 48))
PLACEMENTS = ("post", "pre", "deepnorm")
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS, nonfinite="halt")
base = dataclasses.replace(
    base,
    model=dataclasses.replace(
        base.model,
        d_model=ablation.pick(smoke=32, full=64),
        n_heads=ablation.pick(smoke=2, full=4),
        d_ff=ablation.pick(smoke=64, full=256),
        scan_layers=True,
    ),
)


def variant(placement: str, depth: int, *, warmup: bool = True, optimizer: str = "adam", steps: int = STEPS):
    model = dataclasses.replace(base.model, placement=placement, n_layers=depth)
    lr = 1e-3 if optimizer == "adam" else 0.1
    optim = dataclasses.replace(
        base.train.optim,
        optimizer=optimizer,
        lr=lr,
        weight_decay=0.0 if optimizer == "sgd" else base.train.optim.weight_decay,  # Adam never decays
        warmup_steps=ablation.pick(smoke=3, full=200) if warmup else 0,
        min_lr=lr / 10,
        momentum=0.9,
    )
    return dataclasses.replace(base, model=model, train=dataclasses.replace(base.train, steps=steps, optim=optim))


# %% [markdown]
# ## Gradient norms and residual updates at initialisation
# One optimizer step of each model logs the gradient norm of every layer (the training metric
# `grad_norm/layers`); a forward pass with `return_hidden=True` gives the residual stream
# entering each layer. One initialisation per seed.

# %%
deep = max(DEPTHS)
init_grads = {p: [] for p in PLACEMENTS}
rel_change = {p: [] for p in PLACEMENTS}
for placement in PLACEMENTS:
    for seed in SEEDS:
        cfg = ablation.with_seed(variant(placement, deep, steps=1), seed)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, log_every=1, eval_every=1))
        curves = ablation.train_curves(cfg, f"init_{placement}_s{seed}", NOTEBOOK)
        rec = next(r for r in read_metrics(curves.workdir) if "train/grad_norm/layers" in r)
        init_grads[placement].append(np.asarray(rec["train/grad_norm/layers"]))
        model = build_model(cfg.model, seed=seed)
        tokens = jax.random.randint(jax.random.key(seed), (4, base.data.seq_len), 0, cfg.model.vocab_size)
        _, aux = model(tokens, return_hidden=True)
        h = aux["hidden"]  # [L + 1, B, T, D]: entering each layer, then leaving the last
        rel_change[placement].append(
            np.asarray(
                jnp.mean(jnp.linalg.norm(h[1:] - h[:-1], axis=-1) / jnp.linalg.norm(h[:-1], axis=-1), axis=(1, 2))
            )
        )

layers = np.arange(1, deep + 1)
fig_init, axes = plt.subplots(1, 2, figsize=(13, 4))
for i, placement in enumerate(PLACEMENTS):
    for j in range(len(SEEDS)):
        label = placement if j == 0 else None
        axes[0].semilogy(layers, init_grads[placement][j], "o-", ms=3, color=f"C{i}", alpha=0.7, label=label)
        axes[1].plot(layers, rel_change[placement][j], "o-", ms=3, color=f"C{i}", alpha=0.7, label=label)
post = init_grads["post"][0]
axes[0].semilogy(layers, post[-1] * 2.0 ** (-(deep - layers) / 2), "k:", label="2^(-(L-l)/2) (notes, Post-LN)")
axes[0].set(
    xlabel="layer l (1 = next to the input)",
    ylabel="gradient norm at init",
    title=f"Per-layer gradient norm, {deep} layers (one line per seed)",
)
axes[1].set(xlabel="layer l", ylabel="||x_{l+1} - x_l|| / ||x_l||", title="Relative change of the residual stream")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Training: placement x depth x warmup (Adam), and SGD at the shallower depths
# A run that diverges counts as the uniform predictor (ln V nats), so that it can be paired.

# %%
keys = [(p, d, w, "adam") for p, d, w in itertools.product(PLACEMENTS, DEPTHS, (True, False))]
keys += [(p, d, True, "sgd") for p, d in itertools.product(("post", "pre"), DEPTHS[:2])]
grid = {key: variant(key[0], key[1], warmup=key[2], optimizer=key[3]) for key in keys}
runs = {
    (*key, seed): ablation.train_curves(ablation.with_seed(cfg, seed), "_".join(map(str, (*key, f"s{seed}"))), NOTEBOOK)
    for key, cfg in grid.items()
    for seed in SEEDS
}
ceiling = math.log(base.model.vocab_size)


def final(key) -> list[float]:
    """Final validation loss of each seed (ln V for a diverged run)."""
    return [runs[(*key, seed)].final_or(ceiling) for seed in SEEDS]


for key in grid:
    diverged = sum(runs[(*key, seed)].diverged for seed in SEEDS)
    print(key, ablation.mean_text(final(key), 4), f"{diverged} diverged" if diverged else "")

# %%
fig_grid, axes = plt.subplots(1, len(DEPTHS), figsize=(5 * len(DEPTHS), 4), sharey=True, squeeze=False)
axes = axes[0]
for ax, depth in zip(axes, DEPTHS):
    for i, (placement, warmup) in enumerate(itertools.product(PLACEMENTS, (True, False))):
        for seed in SEEDS:
            c = runs[(placement, depth, warmup, "adam", seed)]
            label = f"{placement}{'' if warmup else ', no warmup'}" if seed == SEEDS[0] else None
            ax.plot(c.steps, c.train_loss, ls="-" if warmup else "--", color=f"C{i}", alpha=0.7, label=label)
    ax.set(title=f"{depth} layers, Adam (one line per seed)", xlabel="step", ylim=(1.0, 4.5))
    ax.legend(fontsize=7)
axes[0].set_ylabel("train loss (nats/char)")
plt.show()

# %% [markdown]
# ## Verdict
# Differences paired by seed. Margins and thresholds fixed before the run: Pre-LN "trains without
# warmup" and DeepNorm "trains deep Post-LN stably" mean no worse by more than 0.05 and 0.02 nats
# (DeepNorm against Post-LN at the same warmup), and DeepNorm ends 0.1 nats below ln V, the
# uniform predictor's loss that a diverged run is given;
# the Post-LN init slope of log2 gradient norm per layer equals the notes' 0.5 within +-0.25 and
# Pre-LN's largest/smallest layer gradient is below 2; Pre-LN's relative change at the last layer
# is below half the first's.

# %%
shallow, deepest = DEPTHS[0], DEPTHS[-1]
diff = lambda a, b: np.subtract(final(a), final(b))
gap_nowarm = {d: diff(("post", d, False, "adam"), ("post", d, True, "adam")) for d in DEPTHS}
pre_gap = {d: diff(("pre", d, False, "adam"), ("pre", d, True, "adam")) for d in DEPTHS}
sgd_hurt = {p: diff((p, shallow, True, "sgd"), (p, shallow, True, "adam")) for p in ("post", "pre")}
slopes = [np.polyfit(layers, np.log2(g), 1)[0] for g in init_grads["post"]]
pre_spread = [float(np.max(g) / np.min(g)) for g in init_grads["pre"]]
claims = {
    "Post-LN without warmup trains worse, more so with depth; warmup rescues it": (
        f"loss(no warmup) - loss(warmup) at {deepest} layers; that gap minus the gap at {shallow}",
        [
            ablation.paired(gap_nowarm[deepest], expect="greater"),
            ablation.paired(gap_nowarm[deepest], gap_nowarm[shallow], expect="greater")
            if deepest != shallow
            else ablation.Comparison.unmeasured("greater", "one depth only"),
        ],
    ),
    "Pre-LN trains without warmup": (
        "loss(no warmup) - loss(warmup), " + ", ".join(f"{d} layers" for d in DEPTHS),
        [ablation.paired(pre_gap[d], expect="not greater", margin=0.05) for d in DEPTHS],
    ),
    "Post-LN (with warmup) can end lower than Pre-LN at shallow depth": (
        f"{shallow} layers, loss post - pre",
        [ablation.paired(final(("post", shallow, True, "adam")), final(("pre", shallow, True, "adam")), expect="less")],
    ),
    "Adam is less hurt than SGD by Post-LN": (
        f"at {shallow} layers, (loss SGD - loss Adam) for post minus the same for pre (one SGD LR for both)",
        [ablation.paired(sgd_hurt["post"], sgd_hurt["pre"], expect="greater")],
    ),
    "DeepNorm trains deep Post-LN stably": (
        f"{deepest} layers, loss deepnorm - post with warmup, then without (like for like); "
        f"deepnorm's loss with and without warmup against the uniform predictor's ln V = {ceiling:.3f}",
        [
            ablation.paired(
                final(("deepnorm", deepest, w, "adam")),
                final(("post", deepest, w, "adam")),
                expect="not greater",
                margin=0.02,
            )
            for w in (True, False)
        ]
        + [
            ablation.paired(final(("deepnorm", deepest, w, "adam")), expect="less", reference=ceiling - 0.1)
            for w in (True, False)
        ],
    ),
    "At init, Post-LN gradients shrink towards the input like 2^(-l/2); Pre-LN's are flat": (
        "Post-LN log2 slope per layer (notes: +0.5 towards the output); Pre-LN max/min layer gradient norm",
        [
            ablation.paired(slopes, expect="equal", reference=0.5, margin=0.25),
            ablation.paired(pre_spread, expect="less", reference=2.0),
        ],
    ),
    "Pre-LN's relative residual change falls with depth": (
        f"pre: change at layer {deep} over the change at layer 1",
        [ablation.paired([r[-1] / r[0] for r in rel_change["pre"]], expect="less", reference=0.5)],
    ),
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "init_grad_norms": {p: {"seeds": list(SEEDS), "values": v} for p, v in init_grads.items()},
        "relative_change": {p: {"seeds": list(SEEDS), "values": v} for p, v in rel_change.items()},
        "post_log2_slope": {"seeds": list(SEEDS), "values": slopes},
        "arms": {
            "/".join(map(str, k)): ablation.arm_record(dict(zip(SEEDS, ({"final_val": v} for v in final(k)))))
            for k in grid
        },
        "verdicts": table,
    },
    figures={"init": fig_init, "training": fig_grid},
    configs={"/".join(map(str, k)): cfg for k, cfg in grid.items()},
    seeds=SEEDS,
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
)
print("results in", out)
