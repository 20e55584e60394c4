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
# # Positional encodings: none, sinusoidal, learned, relative bias, RoPE, ALiBi
#
# **Claims** (the notes and the papers behind each encoding):
# 1. Without any position information self-attention is permutation-equivariant: permuting the
#    input permutes the outputs and changes nothing else.
# 2. RoPE makes the query-key dot product a function of the relative offset only.
# 3. Relative encodings (relative bias, RoPE, ALiBi) hold up better than absolute ones
#    (sinusoidal, learned) when evaluated beyond the training length; a learned table cannot
#    extrapolate at all (its rows past the training length were never trained). ALiBi was
#    designed for exactly this (Press et al. 2022).
#
# Each encoding trains the same character-level Shakespeare model at context 64 with several seeds
# (initialisation and data order; encodings paired by seed), then is evaluated at 64, 128 and 256.
# The sinusoid runs twice: with this preset's small (std 0.02) token embeddings, which it outweighs
# about 35:1, and as in Vaswani et al. (`sinusoidal_scaled`: embeddings scaled to unit variance); both
# count as absolute encodings in claim 3.
# Claims 1 and 2 are checked on several random draws. Each verdict comes from a 95% interval over
# seeds (90% for "no worse", against a margin fixed before the run). `TRANSFORMER_JAX_SMOKE=1`:
# tiny sizes, 2 seeds.

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

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models import EmbeddingsConfig, InitConfig, SoftmaxAttention, build_model, with_changes
from transformer_jax.ops.rope import apply_rope

NOTEBOOK = "positional_encoding"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
TRAIN_LEN, EVAL_LENS = 64, ablation.pick(smoke=(64, 256), full=(64, 128, 256))
ENCODINGS = ("none", "sinusoidal", "sinusoidal_scaled", "learned", "relative_bias", "rope", "alibi")
# sinusoidal_scaled: Vaswani et al.'s setting, token embeddings of unit variance (init std d^-1/2, times
# sqrt(d)) beside the unit-amplitude sinusoids; plain `sinusoidal` keeps this preset's std-0.02 embeddings,
# which the sinusoids outweigh about 35:1
ARM_MODEL = {"sinusoidal_scaled": {"position": "sinusoidal", "embeddings": EmbeddingsConfig(scale=True)}}
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
    name, **{"notes": "004_0c7acc088a14ef8a.txt", "n": 3, "history": (REGISTERED,), **kw}
)
CLAIMS = ablation.register(
    claim(
        "Without positions, self-attention is permutation-equivariant",
        says="neither attention nor the FFN sees word order, so a phrase and its reordering look the same",
        measure="max |f(Px) - Pf(x)| / max |f(x)| without positions; the smaller of learned and RoPE with them",
        criteria=(ablation.Criterion("less", 1e-4), ablation.Criterion("greater", 1e-2)),
        why="an algebraic identity of attention without positions: only float32 rounding can break it",
        check=True,
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-01",
                "a bound of 1e-4 on the difference relative to max |f(x)|, not an absolute 1e-4",
                "the first FULL run's absolute bound failed on float32 rounding: 1.6e-4 on logits of 21 (09b0488)",
                seen="2026-12-01",
            ),
        ),
    ),
    claim(
        "RoPE's dot product depends only on the relative offset",
        notes="002_aa3d7b0c5341285e.txt",
        says="RoPE rotates pairs of dimensions by an angle proportional to the position",
        measure="largest spread along a diagonal of the score matrix, over the score's std",
        criteria=(ablation.Criterion("less", 1e-3),),
        why="an identity of rotations, R(m)^T R(n) = R(n - m): only float32 rounding can break it",
        check=True,
    ),
    claim(
        "Relative encodings degrade less than absolute ones at 4x the training length",
        says="fixed absolute encodings generalise poorly to long sequences; relative ones encode i - j",
        measure="loss at 256 minus loss at 64 (trained at 64), worst relative minus best absolute, paired by seed",
        criteria=(ablation.Criterion("less"),),
        why="a direction",
    ),
    claim(
        "A learned table cannot extrapolate",
        says="a learned table cannot be applied to sequences longer than it",
        measure="learned table: loss at 256 minus loss at 64",
        criteria=(ablation.Criterion("greater", 0.5),),
        why="0.5 nats: positions past the table are untrained, a clear degradation far above seed noise",
    ),
    claim(
        "ALiBi extrapolates best",
        says="not in the notes (ALiBi is not mentioned); they say only that absolute encodings extrapolate poorly",
        measure="ALiBi's growth from 64 to 256 minus the best other encoding's (per seed)",
        criteria=(ablation.Criterion("not greater", margin=0.02),),
        why="0.02 nats, set before the run as a negligible difference; not sized from a pilot",
    ),
)

# %% [markdown]
# ## 1. Permutation equivariance without positions
# A randomly initialised model with `position="none"` and no causal mask: outputs for a permuted
# input against the permuted outputs, as a difference relative to the largest output (float32
# rounding through the layers leaves about 1e-5; a position encoding changes outputs by O(1)).
# With a position encoding the same test fails. One initialisation, input and permutation per seed.
# (The first FULL run used an absolute bound of 1e-4 on logits of size ~10 with `init.std=0.5`,
# read 1.6e-4 and so reported "does not hold".)

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
base = dataclasses.replace(base, model=with_changes(base.model, max_len=max(EVAL_LENS)))
equivariance = {}
for position in ("none", "learned", "rope"):
    cfg = dataclasses.replace(
        base.model, position=position, attention=SoftmaxAttention(causal=False), init=InitConfig(std=0.5)
    )
    equivariance[position] = []
    for seed in SEEDS:
        model = build_model(cfg, seed=seed)
        tokens = jax.random.randint(jax.random.key(seed), (2, TRAIN_LEN), 0, base.model.dims.vocab_size)
        perm = np.random.default_rng(seed).permutation(TRAIN_LEN)
        logits, _ = model(tokens)
        logits_perm, _ = model(tokens[:, perm])
        equivariance[position].append(float(jnp.max(jnp.abs(logits_perm - logits[:, perm])) / jnp.max(jnp.abs(logits))))
print("max |f(P x) - P f(x)| / max |f(x)| by encoding and seed:", equivariance)

# %% [markdown]
# ## 2. RoPE scores depend on the offset only
# Random q and k (one pair per seed), placed at positions m and n: q_m . k_n for all pairs. Along
# every diagonal (fixed m - n) the score is constant.

# %%
D, P = 64, 128
pos = jnp.arange(P)[None]


def rope_scores(seed: int) -> np.ndarray:
    q, k = jax.random.normal(jax.random.key(1000 + seed), (2, 1, 1, 1, D))
    q_rot = apply_rope(jnp.broadcast_to(q, (1, P, 1, D)), pos)[0, :, 0]
    k_rot = apply_rope(jnp.broadcast_to(k, (1, P, 1, D)), pos)[0, :, 0]
    return np.asarray(q_rot @ k_rot.T)


offsets = np.arange(-P + 1, P)
all_scores = [rope_scores(seed) for seed in SEEDS]
rope_spread = [max(np.ptp(np.diagonal(s, -o)) for o in offsets) / np.std(s) for s in all_scores]
scores = all_scores[0]
fig_rope, axes = plt.subplots(1, 2, figsize=(11, 3.8))
axes[0].imshow(scores, cmap="RdBu")
axes[0].set(xlabel="key position n", ylabel="query position m", title="RoPE score q_m . k_n")
axes[1].plot(offsets, [np.mean(np.diagonal(scores, -o)) for o in offsets])
axes[1].set(xlabel="offset m - n", ylabel="score", title="Score against the relative offset")
plt.show()
print("largest spread of the score along a diagonal, over the score's std, by seed:", rope_spread)

# %% [markdown]
# ## 3. Training at context 64, evaluating at 64, 128 and 256
# The learned table has `max_len` = 256 rows so that longer evaluation is possible at all. Each
# encoding's learning rate is the best of 1/3, 1 and 3 x 1e-3 (grown by 3x past an edge that wins,
# up to twice) on a dev split carved from the end of the training text (one seed,
# `ablation.sweep_lr`); the validation split is scored.


# %%
def losses_by_length(c: ablation.Curves) -> dict[str, float]:
    """Validation loss of the trained run at each evaluation context (kept with the run's summary)."""
    return {str(n): ablation.eval_loss(c.workdir, [f"data.seq_len={n}"]) for n in EVAL_LENS}


GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
configs, curves, eval_loss, sweeps = {}, {}, {}, {}
for position in ENCODINGS:
    model_cfg = dataclasses.replace(base.model, **ARM_MODEL.get(position, {"position": position}))
    untuned = dataclasses.replace(base, model=model_cfg)
    sweeps[position] = ablation.sweep_lr(untuned, position, GRID, NOTEBOOK)
    edge = " (at the edge of the grid)" if sweeps[position]["at_edge"] else ""
    print(f"{position}: lr {sweeps[position]['lr']:.3g}{edge}; dev loss by lr", sweeps[position]["dev_loss"])
    configs[position] = ablation.with_lr(untuned, sweeps[position]["lr"])
    eval_loss[position] = {n: [] for n in EVAL_LENS}
    for seed in SEEDS:
        c = ablation.run_arm(configs[position], position, seed, NOTEBOOK, measure=losses_by_length)
        curves[f"{position} s{seed}"] = c
        for n in EVAL_LENS:
            eval_loss[position][n].append((c.summary["measured"] or {}).get(str(n), float("nan")))
    print(position, {n: ablation.mean_text(v) for n, v in eval_loss[position].items()})

fig_len, axes = plt.subplots(1, 2, figsize=(12, 4))
for i, position in enumerate(ENCODINGS):
    c = curves[f"{position} s{SEEDS[0]}"]
    axes[0].plot(c.steps, c.train_loss, color=f"C{i}", label=position)
    axes[1].plot(EVAL_LENS, [np.mean(eval_loss[position][n]) for n in EVAL_LENS], "o-", color=f"C{i}", label=position)
axes[0].set(xlabel="step", ylabel="train loss (nats/char)", title=f"Training at context {TRAIN_LEN} (seed {SEEDS[0]})")
axes[1].set(
    xlabel="evaluation context",
    ylabel="validation loss (nats/char), mean over seeds",
    xscale="log",
    title="Loss beyond the training length",
)
axes[1].set_xticks(EVAL_LENS, [str(n) for n in EVAL_LENS])
for ax in axes:
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Verdict
# Thresholds and margins fixed before the run: equivariance means a relative difference below
# 1e-4 without positions and above 1e-2 with them; offset-only means a diagonal spread below 1e-3
# of the score's std; "cannot extrapolate" means the loss grows by more than 0.5 nats from 64 to
# 256; "extrapolates best" means ALiBi's growth is no worse than the best other encoding's (chosen
# per seed) by more than 0.02 nats. The equivariance bound became relative after the first FULL run
# (above); that row and RoPE's offset are identities, registered as checks, not verdicts.

# %%
growth = {p: np.subtract(eval_loss[p][EVAL_LENS[-1]], eval_loss[p][TRAIN_LEN]) for p in ENCODINGS}
relative, absolute = ("relative_bias", "rope", "alibi"), ("sinusoidal", "sinusoidal_scaled", "learned")
others = [p for p in ENCODINGS if p != "alibi"]
claims = {
    "Without positions, self-attention is permutation-equivariant": (
        "relative difference between f(Px) and Pf(x), none; then the smaller of learned and rope",
        [
            ablation.paired(equivariance["none"], expect="less", reference=1e-4),
            ablation.paired(
                np.minimum(equivariance["learned"], equivariance["rope"]), expect="greater", reference=1e-2
            ),
        ],
    ),
    "RoPE's dot product depends only on the relative offset": (
        "largest spread along a diagonal over the score's std",
        [ablation.paired(rope_spread, expect="less", reference=1e-3)],
    ),
    "Relative encodings degrade less than absolute ones at 4x the training length": (
        "; ".join(f"{p} {ablation.mean_text(growth[p], 2)}" for p in ENCODINGS)
        + " nats (loss at 256 minus loss at 64); worst relative - best absolute",
        [
            ablation.paired(
                np.max([growth[p] for p in relative], axis=0),
                np.min([growth[p] for p in absolute], axis=0),
                expect="less",
            )
        ],
    ),
    "A learned table cannot extrapolate": (
        "learned: loss at 256 - loss at 64",
        [ablation.paired(growth["learned"], expect="greater", reference=0.5)],
    ),
    "ALiBi extrapolates best": (
        "ALiBi's growth - the best other encoding's",
        [
            ablation.paired(
                growth["alibi"], np.min([growth[p] for p in others], axis=0), expect="not greater", margin=0.02
            )
        ],
    ),
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "equivariance": {p: {"seeds": list(SEEDS), "values": v} for p, v in equivariance.items()},
        "rope_diag_spread_over_std": {"seeds": list(SEEDS), "values": rope_spread},
        "arms": {
            p: ablation.arm_record(
                {s: {f"val loss at {n}": eval_loss[p][n][i] for n in EVAL_LENS} for i, s in enumerate(SEEDS)}
            )
            for p in ENCODINGS
        },
        "curves": curves,
        "lr_sweeps": sweeps,
        "verdicts": table,
    },
    figures={"rope_scores": fig_rope, "length": fig_len},
    configs=configs,
    seeds=SEEDS,
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## Reading the FULL run (3 seeds, 2026-12-03)
# All five claims hold here, and the intervals are far from zero except claim 3's (worst relative
# minus best absolute growth -0.33 [-0.60, -0.06] nats). What a reader should also see in the table:
# - ALiBi is the only encoding whose loss does not grow with length (1.744 at 64, 1.724 at 256), but
#   it is not the best at the training length: relative bias and RoPE reach 1.68 there.
# - RoPE and the relative bias degrade, by 0.47 and 0.90 nats at 4x: relative encodings are not
#   free of a length limit (their attention sees offsets never trained, and RoPE's rotations meet
#   unseen phases; Press et al. report the same for RoPE).
# - Without any position encoding the loss grows by only 0.40 nats, less than every absolute
#   encoding, while starting highest (2.03 at 64): with a causal mask the model can still infer
#   position (Haviv et al. 2022), and it has no table to run off the end of.
# - The sinusoid's growth depends on how it is mixed with the tokens: beside std-0.02 embeddings
#   (this preset's) it grows 2.28 nats with one seed far off (+-1.41); beside unit-variance
#   embeddings, as in Vaswani et al., 1.23, like the learned table (1.31). The claim holds with
#   either.
# - Scale: 0.8M parameters, 2,000 steps of 12 x 64 characters; lengths 1x, 2x, 4x only.
