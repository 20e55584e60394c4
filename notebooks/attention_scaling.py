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
# trains a character-level model both ways at two head sizes. `TRANSFORMER_JAX_SMOKE=1`: tiny sizes.

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

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.ops.attention import attention

NOTEBOOK = "attention_scaling"
STEPS = ablation.pick(smoke=20, full=2000)
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| devices:", jax.devices())

# %% [markdown]
# ## Part 1: logits, saturation and gradients against d_k
# Random q, k, v with unit-variance entries, one query over S = 64 keys, many samples.

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


probes = {"scaled 1/sqrt(d_k)": [probe(d, None) for d in DKS], "unscaled": [probe(d, 1.0) for d in DKS]}
fig_probe, axes = plt.subplots(1, 4, figsize=(18, 3.8))
for name, rows in probes.items():
    axes[0].loglog(DKS, [r["logit_var"] for r in rows], "o-", label=name)
    axes[1].semilogx(DKS, [r["max_weight"] for r in rows], "o-", label=name)
    axes[2].loglog(DKS, [r["softmax_jacobian"] for r in rows], "o-", label=name)
    axes[3].loglog(DKS, [r["grad_q_norm"] for r in rows], "o-", label=name)
axes[0].loglog(DKS, DKS, "k:", label="d_k (theory, unscaled)")
axes[0].set(xlabel="d_k", ylabel="variance of the logits", title="Logit variance")
axes[1].axhline(1 / S, color="k", ls=":", label="uniform 1/S")
axes[1].set(xlabel="d_k", ylabel="mean largest attention weight", title="Softmax saturation")
axes[2].set(xlabel="d_k", ylabel="mean ||diag(p) - p p^T||_F", title="Softmax Jacobian")
axes[3].set(xlabel="d_k", ylabel="mean |d out / d q|", title="Gradient reaching the query")
for ax in axes:
    ax.legend(fontsize=8)
plt.show()
slope = np.polyfit(np.log(DKS), np.log([r["logit_var"] for r in probes["unscaled"]]), 1)[0]
print(f"unscaled: log-log slope of the logit variance against d_k = {slope:.3f} (theory 1)")

# %% [markdown]
# ## Part 2: training with and without the factor
# The character-level Shakespeare model (4 layers, d_model 128) with 4 heads (d_k = 32) and with
# 1 head (d_k = 128); the only change is `model.attention_scale=1.0`. Note that the models start
# with small weights (std 0.02), so the logits only grow as training proceeds.

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
configs, curves = {}, {}
for heads in ablation.pick(smoke=[2], full=[4, 1]):
    d_k = base.model.d_model // heads
    for scaled in (True, False):
        name = f"d_k={d_k} {'scaled' if scaled else 'unscaled'}"
        model = dataclasses.replace(base.model, n_heads=heads, attention_scale=None if scaled else 1.0)
        configs[name] = dataclasses.replace(base, model=model)
        curves[name] = ablation.train_curves(configs[name], name.replace(" ", "_").replace("=", ""), NOTEBOOK)

fig_train, ax = plt.subplots(figsize=(7, 4))
for name, c in curves.items():
    ax.plot(c.steps, c.train_loss, ls="-" if "unscaled" not in name else "--", label=f"{name} (train)")
ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="Training with and without 1/sqrt(d_k)")
ax.legend()
plt.show()
final = {name: c.final_val for name, c in curves.items()}
print({k: round(v, 4) for k, v in final.items()})

# %% [markdown]
# ## Verdict

# %%
sc, un = probes["scaled 1/sqrt(d_k)"], probes["unscaled"]
gaps = {}
for name in final:
    if name.endswith("unscaled"):
        # a diverged run (final loss NaN or inf) counts as the worse arm: its loss is +inf
        unscaled, scaled = (
            x if np.isfinite(x) else np.inf for x in (final[name], final[name.replace("unscaled", "scaled")])
        )
        gaps[name.split()[0]] = unscaled - scaled
big = max(gaps, key=lambda k: int(k.split("=")[1]))
rows = [
    (
        "Unscaled logits have variance ~ d_k; scaled ones ~ 1",
        f"unscaled slope {slope:.2f}, variance {un[0]['logit_var']:.1f}..{un[-1]['logit_var']:.0f}; "
        f"scaled {min(r['logit_var'] for r in sc):.2f}..{max(r['logit_var'] for r in sc):.2f}",
        ablation.verdict(0.9 < slope < 1.1 and all(0.7 < r["logit_var"] < 1.3 for r in sc)),
    ),
    (
        "Without scaling the softmax saturates as d_k grows",
        f"largest weight {un[0]['max_weight']:.2f} -> {un[-1]['max_weight']:.2f} (scaled {sc[-1]['max_weight']:.2f})",
        ablation.verdict(un[-1]["max_weight"] > 0.8 and sc[-1]["max_weight"] < 0.5),
    ),
    (
        "... and the gradient through the softmax vanishes",
        f"softmax Jacobian norm {un[0]['softmax_jacobian']:.3g} -> {un[-1]['softmax_jacobian']:.3g} unscaled, "
        f"{sc[0]['softmax_jacobian']:.3g} -> {sc[-1]['softmax_jacobian']:.3g} scaled (the gradient reaching q "
        f"still grows, {un[0]['grad_q_norm']:.3g} -> {un[-1]['grad_q_norm']:.3g}, since the logits scale with |k|)",
        ablation.verdict(un[-1]["softmax_jacobian"] < 0.5 * min(un[0]["softmax_jacobian"], sc[-1]["softmax_jacobian"])),
    ),
]
# one row per head size (a gap within 0.02 nats is noise), then whether the harm grows with d_k
rows += [
    (
        f"Training without the factor ends worse at {k}",
        f"unscaled - scaled = {v:+.3f} nats (final val loss)",
        ablation.verdict(None if np.isnan(v) or abs(v) < 0.02 else v > 0),
    )
    for k, v in gaps.items()
]
small = min(gaps, key=lambda k: int(k.split("=")[1]))
rows.append(
    (
        "... and more so at larger d_k",
        f"gap {gaps[small]:+.3f} at {small} -> {gaps[big]:+.3f} at {big}",
        ablation.verdict(
            None
            if not np.isfinite(gaps[big] - gaps[small]) or abs(gaps[big] - gaps[small]) < 0.02
            else gaps[big] > gaps[small]
        ),
    )
)
table = ablation.verdict_table(rows)
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {"probes": probes, "dks": DKS, "slope": slope, "final_val": final, "curves": curves, "verdicts": table},
    figures={"probes": fig_probe, "training": fig_train},
    configs=configs,
)
print("results in", out)
