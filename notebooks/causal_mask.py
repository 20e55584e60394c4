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
# # What the causal mask is for
#
# A decoder-only language model predicts token t+1 from tokens 1..t. The causal mask is what keeps
# position t from looking at t+1. **Claim** (the Transformer notes): trained without the mask, the
# training loss collapses, because the model learns to copy the next token it can see; yet the
# model is useless, since masked evaluation and generation (where the future does not exist yet)
# fail.
#
# We train the same character-level model on Shakespeare with and without the mask, each with
# several seeds (the seed sets the initialisation and the data order; the two arms are paired by
# seed), then evaluate both with the mask on and let both generate. Each verdict comes from the 95%
# interval of the mean paired difference over seeds (`transformer_jax.ablation`'s protocol). Both
# arms train at fixed learning rates, untuned: the claims are about a failure of kind (a copying
# shortcut, then loss and text with the mask on), not about which arm trains better, so each claim
# is shown at two learning rates (AdamW with warmup at 1e-3, the recipe's, and 3e-3). Set
# `TRANSFORMER_JAX_SMOKE=1` for a quick pass with tiny sizes and 2 seeds (what CI runs).

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
import re

import jax
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.cli.sample import sample_text
from transformer_jax.data.shakespeare import shakespeare_text
from transformer_jax.decode import TopK
from transformer_jax.models import SoftmaxAttention

NOTEBOOK = "causal_mask"
STEPS = ablation.pick(smoke=30, full=2000)
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
claim = lambda name, **kw: ablation.Claim(name, **{"notes": "004_0c7acc088a14ef8a.txt", "n": 3, **kw})
# the pilot: the share of characters in real words, unmasked - masked, seeds 0-2 of the FULL run of
# 2026-12-03: -0.340, -0.417, -0.320 (lr 1e-3) and -0.353, -0.423, -0.307 (lr 3e-3); sd pooled over both
# registered at alpha 0.05 (a one-sided test at 90%) while the verdict reads a two-sided 95% interval
# (0.025 per side): the gallery labels the row underpowered (`ablation.Claim.underpowered`)
GEN_POWER = ablation.Power(
    sd=0.055,
    effect=0.15,
    alpha=0.05,
    pilot="the FULL run of 2026-12-03, seeds 0-2: unmasked - masked real-word character share, paired sd "
    "pooled over the two learning rates",
)
FRESH_FIRST = 3  # the first seed nobody has seen: the committed runs used 0-2
CLAIMS = ablation.register(
    claim(
        "Without the mask the training loss collapses (the model copies the visible next token)",
        says="trained without the causal mask, the loss gets very low because the model only learns to copy",
        lines=(91, 91),
        measure="final training loss, unmasked-trained minus half the masked-trained's, paired by seed, per LR",
        criteria=(ablation.Criterion("less"),),
        why="'very low' read as below half the masked model's loss: copying the visible token needs no model",
        history=(REGISTERED,),
    ),
    claim(
        "... but evaluation with the mask fails",
        says="the copying model's low loss is an illusion that shows as soon as the future is hidden",
        lines=(91, 91),
        measure="validation loss with the mask, unmasked-trained minus masked-trained, paired by seed, per LR",
        criteria=(ablation.Criterion("greater", 0.5),),
        why="worse by more than 0.5 nats: far beyond seed-to-seed noise (about 0.01 nats here)",
        history=(REGISTERED,),
    ),
    claim(
        "... and so does generation",
        says="the problem only shows when the model is used for real, i.e. when it generates",
        lines=(91, 91),
        measure="share of sampled characters inside real words, unmasked-trained minus masked-trained, paired by "
        f"seed, per LR, on fresh seeds {FRESH_FIRST}-{FRESH_FIRST + GEN_POWER.n() - 1} (both arms at the rates "
        "of the committed runs)",
        criteria=(ablation.Criterion("less", -0.2),),
        why="lower by more than 0.2 of the sample: text visibly less like English. n sized to clear the -0.2 line "
        "with power 0.8 when the true difference is -0.35 (0.15 past it; the pilot's was -0.36), from the pilot's "
        "paired sd; a smaller gap than that may come out inconclusive. Refuted (does not hold) if the interval lies "
        "above -0.2: the unmasked-trained model then writes nearly as many real words as the masked one (it can: "
        "each window's last position has no future to copy, so it is trained there as a real next-token model)",
        n=GEN_POWER.n(),
        power=GEN_POWER,
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-01",
                "generation judged by the share of characters in real words, not the share of real words",
                "a sample of newlines and 'o'/'me' scored 0.65 words-real under the first metric (commit 658a7e1)",
                seen="2026-12-01",
            ),
            ablation.Revision(
                "2026-12-05",
                f"judged on fresh seeds {FRESH_FIRST}-{FRESH_FIRST + GEN_POWER.n() - 1} under the criterion above, "
                "both arms at each committed learning rate (the other rows stay on seeds 0-2)",
                "seeds 0-2 were seen before the metric changed; the same seeds would reproduce the same samples",
                fresh=True,
                seeds=tuple(range(FRESH_FIRST, FRESH_FIRST + GEN_POWER.n())),
            ),
        ),
    ),
)
pw = GEN_POWER
print(f"generation: n = {pw.n()} seeds for sd {pw.sd} and effect {pw.effect} (power {pw.power})")

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
LRS = ablation.pick(smoke=(1e-3,), full=(1e-3, 3e-3))


def arm_name(masked: bool, lr: float) -> str:
    return f"{'masked' if masked else 'unmasked'}, lr {lr:g}"


configs = {
    arm_name(masked, lr): ablation.with_lr(
        dataclasses.replace(base, model=dataclasses.replace(base.model, attention=SoftmaxAttention(causal=masked))), lr
    )
    for lr in LRS
    for masked in (True, False)
}
SAMPLE_TOKENS = ablation.pick(smoke=40, full=300)


def measure(seed: int):
    """What each trained run is asked, read from its last checkpoint and kept with the run's
    summary: the validation loss with the mask on, and one top-k sample (sampling seed = run seed)."""

    def read(c: ablation.Curves) -> dict:
        return {
            "val loss with the mask": ablation.eval_loss(c.workdir, ["model.attention.causal=true"]),
            "sample": sample_text(
                c.workdir, prompt="ROMEO:", max_new_tokens=SAMPLE_TOKENS, sampling=TopK(k=10), seed=seed
            ),
        }

    return read


curves = {
    (name, seed): ablation.run_arm(cfg, name, seed, NOTEBOOK, measure=measure(seed))
    for name, cfg in configs.items()
    for seed in SEEDS
}
# the generation row on fresh seeds, pair by pair (a sitting that stops midway leaves whole pairs committed)
FRESH = ablation.seeds(full=GEN_POWER.n(), first=FRESH_FIRST)
fresh_curves = {
    (arm_name(masked, lr), seed): ablation.run_arm(
        configs[arm_name(masked, lr)], arm_name(masked, lr), seed, NOTEBOOK, measure=measure(seed)
    )
    for lr in LRS
    for seed in FRESH
    for masked in (False, True)
}

# %% [markdown]
# ## Training curves
# Each model's own training and validation loss (the unmasked model is validated without the mask,
# the way it was trained); one line per seed.

# %%
fig_loss, ax = plt.subplots(figsize=(7, 4))
for (name, seed), c in curves.items():
    if not name.endswith(f"lr {LRS[0]:g}"):
        continue
    color = "C0" if name.startswith("masked") else "C1"
    ax.plot(c.steps, c.train_loss, color=color, alpha=0.7, label=f"{name}: train" if seed == SEEDS[0] else None)
    ax.plot(
        c.val_steps,
        c.val_loss,
        "o--",
        color=color,
        label=f"{name}: validation (as trained)" if seed == SEEDS[0] else None,
    )
ax.set(
    xlabel="step",
    ylabel="cross-entropy (nats/char)",
    title=f"Training with and without the causal mask (lr {LRS[0]:g})",
)
ax.legend()
plt.show()

# %% [markdown]
# ## Evaluating with the mask on, and generating
# Same parameters, `model.attention.causal=true` at evaluation: the unmasked model now has to predict a
# character it cannot see. Each run generates one sample (sampling seed = the run's seed). Both
# were read from each run's last checkpoint right after training (`measure` above) and kept in the
# run's summary under `experiments/results/causal_mask/runs/`.

# %%
all_curves = {**curves, **fresh_curves}
measured = {key: c.summary["measured"] or {} for key, c in all_curves.items()}
masked_loss = {key: m.get("val loss with the mask", float("nan")) for key, m in measured.items()}
samples = {key: m.get("sample", "ROMEO:") for key, m in measured.items()}
for (name, seed), text in samples.items():
    if seed in (SEEDS[0], FRESH[0]):
        print(f"--- {name} (seed {seed}) ---\n{text}\n")

# %% [markdown]
# How much of each sample is made of real words? Two measures: the share of the generated words
# (letters only, lower case) that occur in the training corpus, and the share of the sample's
# characters that lie in such words. The first alone misjudges a sample of a few short words and
# long runs of newlines (every "o" and "me" is a real word); the first FULL run reported only it.

# %%
corpus_words = set(re.findall(r"[a-z]+", shakespeare_text().lower()))


def real_word_share(text: str) -> float:
    words = re.findall(r"[a-z]+", text.lower())
    return sum(w in corpus_words for w in words) / max(len(words), 1)


def real_word_char_share(text: str) -> float:
    words = re.findall(r"[a-z]+", text.lower())
    return sum(len(w) for w in words if w in corpus_words) / max(len(text), 1)


def arm_records(seeds: tuple[int, ...]) -> dict[str, dict]:
    """Each arm's numbers on ``seeds`` (`ablation.arm_record`)."""
    return {
        name: ablation.arm_record(
            {
                seed: {
                    "final train loss": all_curves[name, seed].train_loss[-1],
                    "val loss as trained": all_curves[name, seed].final_val,
                    "val loss with the mask": masked_loss[name, seed],
                    "real-word share of a sample": real_word_share(samples[name, seed][len("ROMEO:") :]),
                    "real-word character share of a sample": real_word_char_share(samples[name, seed][len("ROMEO:") :]),
                }
                for seed in seeds
            }
        )
        for name in configs
    }


arms, fresh_arms = arm_records(SEEDS), arm_records(FRESH)
for label, records in ((f"seeds {SEEDS}", arms), (f"fresh seeds {FRESH}", fresh_arms)):
    for name, arm in records.items():
        print(label, name, {k: round(v, 3) for k, v in arm["mean"].items()})

fig_bar, ax = plt.subplots(figsize=(7, 3.5))
keys = ["final train loss", "val loss with the mask"]
width = 0.8 / len(arms)
for i, name in enumerate(arms):
    values = [ablation.seed_values(arms[name], k) for k in keys]
    ax.bar([j + width * i for j in range(len(keys))], [np.mean(v) for v in values], width=width, label=name)
    for j, v in enumerate(values):
        ax.plot([j + width * i] * len(v), v, "k.", ms=4)
ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))], keys)
ax.set(ylabel="nats/char", title="Loss the model reports vs loss when the future is hidden (dots: seeds)")
ax.legend()
plt.show()

# %% [markdown]
# ## Verdict
# Paired by seed, unmasked-trained minus masked-trained. The thresholds are part of the claims,
# fixed before the run: the training loss falls below half the masked model's; masked evaluation
# is worse by more than 0.5 nats; the share of characters in real words is lower by more than 0.2.
# That last metric replaced the share of real words after a first run's samples (seeds 0-2) were
# seen, so the generation rows are judged on fresh seeds only, under the metric registered before
# their runs (its history in `CLAIMS`); the other rows on seeds 0-2.

# %%
claims = {}
for lr in LRS:
    u = lambda key, lr=lr: ablation.seed_values(arms[arm_name(False, lr)], key)
    m = lambda key, lr=lr: ablation.seed_values(arms[arm_name(True, lr)], key)
    at = f" (lr {lr:g})"
    claims["Without the mask the training loss collapses (the model copies the visible next token)" + at] = (
        "final train loss, unmasked - masked / 2",
        [ablation.paired(u("final train loss"), [x / 2 for x in m("final train loss")], expect="less")],
    )
    claims["... but evaluation with the mask fails" + at] = (
        f"val loss with the mask {ablation.mean_text(u('val loss with the mask'))} unmasked-trained vs "
        f"{ablation.mean_text(m('val loss with the mask'))}; unmasked - masked",
        [ablation.paired(u("val loss with the mask"), m("val loss with the mask"), expect="greater", reference=0.5)],
    )
    fu = lambda key, lr=lr: ablation.seed_values(fresh_arms[arm_name(False, lr)], key)
    fm = lambda key, lr=lr: ablation.seed_values(fresh_arms[arm_name(True, lr)], key)
    chars = "real-word character share of a sample"
    claims["... and so does generation" + at] = (
        f"fresh seeds {FRESH[0]}-{FRESH[-1]}: characters in real words {ablation.mean_text(fu(chars), 2)} "
        f"unmasked-trained vs {ablation.mean_text(fm(chars), 2)}; unmasked - masked",
        [ablation.paired(fu(chars), fm(chars), expect="less", reference=-0.2)],
    )
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "arms": arms,
        "fresh_arms": fresh_arms,
        "samples": {f"{name}_s{seed}": text for (name, seed), text in samples.items()},
        "curves": {f"{name}_s{seed}": c for (name, seed), c in all_curves.items()},
        "verdicts": table,
    },
    figures={"loss_curves": fig_loss, "masked_eval": fig_bar},
    configs=configs,
    seeds=sorted({*SEEDS, *FRESH}),
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## What the notes claim, what was measured, where it sides
# Notes 004, line 91: without the causal mask the loss gets very low, because the model learns only
# to copy the next token it can see; its perplexity looks low too, and the problem shows only when
# the model is put to real use. Seeds 0-2 from the FULL run of 2026-12-03, the generation row on
# fresh seeds 3-5 (FULL rerun of 2026-12-05; values are means +- the half-width of the 95% interval).
# - **Training loss** (seeds 0-2): the unmasked model ends at 0.038 nats/char against the masked
#   model's 1.79 (lr 1e-3) and 1.62 (3e-3), far below half of it at both rates: **sides with the
#   notes**.
# - **Evaluation with the mask on** (seeds 0-2): the same parameters, the future hidden, lose 6.22
#   and 8.87 nats/char against 1.87 and 1.73: worse by +4.35 [+3.78, +4.93] and +7.14 [+5.65, +8.64]
#   nats. It sides with the notes' point that the low loss is an illusion; the notes themselves
#   name real use, not masked evaluation, as where it shows.
# - **Generation** (fresh seeds): the share of sampled characters that lie in real words. This
#   metric replaced the share of real words after seeds 0-2's samples were seen (a sample of
#   newlines and "o"/"me" scored 0.65 on the old one), so the row was registered anew and judged
#   on seeds nobody had seen, n = 3 from a power calculation on seeds 0-2's paired sd (0.055) for a
#   difference 0.15 past the -0.2 line. At lr 3e-3 the unmasked model's samples have 0.02 of their
#   characters in real words against 0.49: -0.476 [-0.521, -0.430], **sides with the notes**. At
#   lr 1e-3, 0.05 against 0.42: -0.363 [-0.600, -0.126], **inconclusive**: every seed is lower by
#   more than 0.2 (-0.25, -0.42, -0.41), but the paired sd came out at 0.095, not the pilot's 0.055,
#   and three seeds cannot put the interval past -0.2. That n was also sized at a one-sided alpha
#   of 0.05 while the verdict reads a two-sided 95% interval (0.025 per side): at 0.025 three seeds
#   had power 0.64 and four were needed, so the gallery labels the row *underpowered* (found
#   2026-12-06; adding seeds after seeing these would not be a fresh test). The samples themselves (above) are runs of
#   colons, "t" and "s", or "MEMERM": the copying model has learned no language it can use alone.
#   Refuted the row would have been by an interval above -0.2: an unmasked model that writes
#   nearly as much English as the masked one, which it could, since the last position of every
#   training window has no future to copy.
