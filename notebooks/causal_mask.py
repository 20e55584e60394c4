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
# We train the same character-level model on Shakespeare twice, with and without the mask, then
# evaluate both with the mask on and let both generate. Set `TRANSFORMER_JAX_SMOKE=1` for a quick
# pass with tiny sizes (what CI runs).

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
import re

import jax
import matplotlib.pyplot as plt

from transformer_jax import ablation
from transformer_jax.cli.sample import sample_text
from transformer_jax.data.shakespeare import shakespeare_text

NOTEBOOK = "causal_mask"
STEPS = ablation.pick(smoke=30, full=2000)
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| devices:", jax.devices())

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
configs = {"masked": base, "unmasked": dataclasses.replace(base, model=dataclasses.replace(base.model, causal=False))}
curves = {name: ablation.train_curves(cfg, name, NOTEBOOK) for name, cfg in configs.items()}

# %% [markdown]
# ## Training curves
# Each model's own training and validation loss (the unmasked model is validated without the mask,
# the way it was trained).

# %%
fig_loss, ax = plt.subplots(figsize=(7, 4))
for name, c in curves.items():
    ax.plot(c.steps, c.train_loss, label=f"{name}: train")
    ax.plot(c.val_steps, c.val_loss, "o--", label=f"{name}: validation (as trained)")
ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="Training with and without the causal mask")
ax.legend()
plt.show()

# %% [markdown]
# ## Evaluating with the mask on, and generating
# Same parameters, `model.causal=true` at evaluation: the unmasked model now has to predict a
# character it cannot see.

# %%
masked_loss = {name: ablation.eval_loss(c.workdir, ["model.causal=true"]) for name, c in curves.items()}
samples = {
    name: sample_text(
        c.workdir, prompt="ROMEO:", max_new_tokens=ablation.pick(smoke=40, full=300), strategy="top_k", top_k=10, seed=0
    )
    for name, c in curves.items()
}
for name, text in samples.items():
    print(f"--- {name} ---\n{text}\n")

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


word_share = {name: real_word_share(text[len("ROMEO:") :]) for name, text in samples.items()}
char_share = {name: real_word_char_share(text[len("ROMEO:") :]) for name, text in samples.items()}
rows = {
    name: {
        "final train loss": curves[name].train_loss[-1],
        "val loss as trained": curves[name].final_val,
        "val loss with the mask": masked_loss[name],
        "real-word share of a sample": word_share[name],
        "real-word character share of a sample": char_share[name],
    }
    for name in curves
}
for name, r in rows.items():
    print(name, {k: round(v, 3) for k, v in r.items()})

fig_bar, ax = plt.subplots(figsize=(7, 3.5))
keys = ["final train loss", "val loss with the mask"]
for i, name in enumerate(curves):
    ax.bar([j + 0.4 * i for j in range(len(keys))], [rows[name][k] for k in keys], width=0.4, label=name)
ax.set_xticks([j + 0.2 for j in range(len(keys))], keys)
ax.set(ylabel="nats/char", title="Loss the model reports vs loss when the future is hidden")
ax.legend()
plt.show()

# %% [markdown]
# ## Verdict

# %%
m, u = rows["masked"], rows["unmasked"]
table = ablation.verdict_table(
    [
        (
            "Without the mask the training loss collapses (the model copies the visible next token)",
            f"final train loss {u['final train loss']:.3f} unmasked vs {m['final train loss']:.3f} masked",
            ablation.verdict(u["final train loss"] < 0.5 * m["final train loss"]),
        ),
        (
            "... but evaluation with the mask fails",
            f"masked val loss {u['val loss with the mask']:.3f} unmasked-trained vs {m['val loss with the mask']:.3f}",
            ablation.verdict(u["val loss with the mask"] > m["val loss with the mask"] + 0.5),
        ),
        (
            "... and so does generation",
            f"characters in real words {u['real-word character share of a sample']:.2f} unmasked-trained vs "
            f"{m['real-word character share of a sample']:.2f} (share of words that are real: "
            f"{u['real-word share of a sample']:.2f} vs {m['real-word share of a sample']:.2f})",
            ablation.verdict(
                u["real-word character share of a sample"] < m["real-word character share of a sample"] - 0.2
            ),
        ),
    ]
)
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {"rows": rows, "samples": samples, "curves": curves, "verdicts": table},
    figures={"loss_curves": fig_loss, "masked_eval": fig_bar},
    configs=configs,
)
print("results in", out)
