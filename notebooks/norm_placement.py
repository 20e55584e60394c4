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
# Character-level Shakespeare with a small width (d_model 64) at depths 6, 18 and 48.
# `TRANSFORMER_JAX_SMOKE=1`: tiny sizes.

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

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models import build_model
from transformer_jax.train.metrics import read_metrics

NOTEBOOK = "norm_placement"
STEPS = ablation.pick(smoke=10, full=1500)
DEPTHS = ablation.pick(smoke=(2,), full=(6, 18, 48))
PLACEMENTS = ("post", "pre", "deepnorm")
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| devices:", jax.devices())

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
# entering each layer.

# %%
deep = max(DEPTHS)
init_grads, rel_change = {}, {}
for placement in PLACEMENTS:
    cfg = variant(placement, deep, steps=1)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, log_every=1, eval_every=1))
    curves = ablation.train_curves(cfg, f"init_{placement}", NOTEBOOK)
    rec = next(r for r in read_metrics(curves.workdir) if "train/grad_norm/layers" in r)
    init_grads[placement] = np.asarray(rec["train/grad_norm/layers"])
    model = build_model(cfg.model)
    tokens = jax.random.randint(jax.random.key(0), (4, base.data.seq_len), 0, cfg.model.vocab_size)
    _, aux = model(tokens, return_hidden=True)
    h = aux["hidden"]  # [L + 1, B, T, D]: entering each layer, then leaving the last
    rel_change[placement] = np.asarray(
        jnp.mean(jnp.linalg.norm(h[1:] - h[:-1], axis=-1) / jnp.linalg.norm(h[:-1], axis=-1), axis=(1, 2))
    )

layers = np.arange(1, deep + 1)
fig_init, axes = plt.subplots(1, 2, figsize=(13, 4))
for placement in PLACEMENTS:
    axes[0].semilogy(layers, init_grads[placement], "o-", ms=3, label=placement)
    axes[1].plot(layers, rel_change[placement], "o-", ms=3, label=placement)
post = init_grads["post"]
axes[0].semilogy(layers, post[-1] * 2.0 ** (-(deep - layers) / 2), "k:", label="2^(-(L-l)/2) (notes, Post-LN)")
axes[0].set(
    xlabel="layer l (1 = next to the input)",
    ylabel="gradient norm at init",
    title=f"Per-layer gradient norm, {deep} layers",
)
axes[1].set(xlabel="layer l", ylabel="||x_{l+1} - x_l|| / ||x_l||", title="Relative change of the residual stream")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Training: placement x depth x warmup (Adam), and SGD at the shallower depths

# %%
keys = [(p, d, w, "adam") for p, d, w in itertools.product(PLACEMENTS, DEPTHS, (True, False))]
keys += [(p, d, True, "sgd") for p, d in itertools.product(("post", "pre"), DEPTHS[:2])]
if ablation.smoke():  # one run of each kind only: the grid is compile-bound at tiny sizes
    keys = [k for k in keys if k[0] == "post" or (k[2] and k[3] == "adam")]
grid = {key: variant(key[0], key[1], warmup=key[2], optimizer=key[3]) for key in keys}
runs = {key: ablation.train_curves(cfg, "_".join(map(str, key)), NOTEBOOK) for key, cfg in grid.items()}


def final(key) -> float:
    """Final validation loss; inf if the run diverged, nan if it was not run (SMOKE)."""
    c = runs.get(key)
    return float("nan") if c is None else float("inf") if c.diverged else c.final_val


for key in runs:
    print(key, round(final(key), 4), "diverged" if runs[key].diverged else "")

# %%
fig_grid, axes = plt.subplots(1, len(DEPTHS), figsize=(5 * len(DEPTHS), 4), sharey=True, squeeze=False)
axes = axes[0]
for ax, depth in zip(axes, DEPTHS):
    for (placement, d, warmup, opt), c in runs.items():
        if d != depth or opt != "adam":
            continue
        ax.plot(
            c.steps,
            c.train_loss,
            ls="-" if warmup else "--",
            label=f"{placement}{'' if warmup else ', no warmup'}" + (" (diverged)" if c.diverged else ""),
        )
    ax.set(title=f"{depth} layers, Adam", xlabel="step", ylim=(1.0, 4.5))
    ax.legend(fontsize=7)
axes[0].set_ylabel("train loss (nats/char)")
plt.show()

# %% [markdown]
# ## Verdict

# %%
gap_nowarm = {d: final(("post", d, False, "adam")) - final(("post", d, True, "adam")) for d in DEPTHS}
pre_gap = {d: final(("pre", d, False, "adam")) - final(("pre", d, True, "adam")) for d in DEPTHS}
shallow, deepest = DEPTHS[0], DEPTHS[-1]
sgd_hurt = {p: final((p, shallow, True, "sgd")) - final((p, shallow, True, "adam")) for p in ("post", "pre")}
fmt = lambda d: ", ".join(f"{k}: {v:+.3f}" for k, v in d.items())
slope = np.polyfit(layers, np.log2(init_grads["post"]), 1)[0]
pre_spread = float(np.max(init_grads["pre"]) / np.min(init_grads["pre"]))
rows = [
    (
        "Post-LN without warmup trains worse, more so with depth; warmup rescues it",
        f"loss(no warmup) - loss(warmup) by depth {fmt(gap_nowarm)}",
        ablation.verdict(gap_nowarm[deepest] > 0.05 and gap_nowarm[deepest] >= gap_nowarm[shallow]),
    ),
    (
        "Pre-LN trains without warmup",
        f"loss(no warmup) - loss(warmup) by depth {fmt(pre_gap)}",
        ablation.verdict(max(pre_gap.values()) < 0.05),
    ),
    (
        "Post-LN (with warmup) can end lower than Pre-LN at shallow depth",
        f"{shallow} layers: post {final(('post', shallow, True, 'adam')):.3f}, "
        f"pre {final(('pre', shallow, True, 'adam')):.3f}",
        ablation.verdict(final(("post", shallow, True, "adam")) < final(("pre", shallow, True, "adam"))),
    ),
    (
        "Adam is less hurt than SGD by Post-LN",
        f"loss(SGD) - loss(Adam) at {shallow} layers: {fmt(sgd_hurt)}",
        ablation.verdict(sgd_hurt["post"] > sgd_hurt["pre"]),
    ),
    (
        "DeepNorm trains deep Post-LN stably",
        f"{deepest} layers: deepnorm {final(('deepnorm', deepest, True, 'adam')):.3f} / no warmup "
        f"{final(('deepnorm', deepest, False, 'adam')):.3f}; post {final(('post', deepest, True, 'adam')):.3f} / "
        f"{final(('post', deepest, False, 'adam')):.3f}",
        ablation.verdict(
            bool(np.isfinite(max(final(("deepnorm", deepest, w, "adam")) for w in (True, False))))
            and max(final(("deepnorm", deepest, w, "adam")) for w in (True, False))
            <= min(final(("post", deepest, w, "adam")) for w in (True, False)) + 0.02
        ),
    ),
    (
        "At init, Post-LN gradients shrink towards the input like 2^(-l/2); Pre-LN's are flat",
        f"Post-LN log2 slope {slope:+.3f} per layer (notes: +0.5 towards the output); Pre-LN max/min {pre_spread:.2f}",
        ablation.verdict(0.25 < slope < 0.75 and pre_spread < 2.0),
    ),
    (
        "Pre-LN's relative residual change falls with depth",
        f"pre: {rel_change['pre'][0]:.3f} (layer 1) -> {rel_change['pre'][-1]:.3f} (layer {deep}); "
        f"post: {rel_change['post'][0]:.3f} -> {rel_change['post'][-1]:.3f}",
        ablation.verdict(rel_change["pre"][-1] < 0.5 * rel_change["pre"][0]),
    ),
]
table = ablation.verdict_table(rows)
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "init_grad_norms": init_grads,
        "relative_change": rel_change,
        "post_log2_slope": slope,
        "final_val": {"/".join(map(str, k)): final(k) for k in runs},
        "verdicts": table,
    },
    figures={"init": fig_init, "training": fig_grid},
    configs={"/".join(map(str, k)): cfg for k, cfg in grid.items()},
)
print("results in", out)
