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
# # From n-grams to Transformers on one split
#
# The notes tell language modelling as a sequence of fixes: n-gram counts are sparse and see a
# fixed, short context; a fixed-window neural LM (Bengio et al. 2003) shares statistical strength
# through embeddings but still sees a fixed window and has no weight sharing across positions; an
# RNN reads any length with one set of weights but serially; the Transformer attends to the whole
# context in parallel. **Claims checked here**, each at the same data and token budget:
# 1. the neural fixed-window LM beats the count-based n-gram;
# 2. the RNN (LSTM) beats the fixed-window LM;
# 3. the Transformer beats the RNN at about the same parameter count;
# 4. the Transformer trains faster (tokens per second) than the RNN, since it is not sequential.
#
# Same corpus (character-level Shakespeare), tokenizer, 64-character validation rows and
# perplexity for all; the neural models train 2000 steps of 12 x 64 characters with the same AdamW
# recipe (peak learning rate 1e-3 for the Transformer, 3e-3 for the others) at ~0.8M parameters.
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
import math

import jax
import matplotlib.pyplot as plt

from transformer_jax import ablation
from transformer_jax.models import BaselineConfig, baseline_model_config

NOTEBOOK = "language_model_history"
STEPS = ablation.pick(smoke=20, full=2000)
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| devices:", jax.devices())

# %%
transformer = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
V = transformer.model.vocab_size
fast = dataclasses.replace(transformer.train, optim=dataclasses.replace(transformer.train.optim, lr=3e-3))


def baseline(kind: str, settings: BaselineConfig, **model) -> object:
    return dataclasses.replace(
        transformer, model=baseline_model_config(kind, settings, vocab_size=V, **model), train=fast
    )


small = ablation.smoke()
configs = {
    "3-gram (Kneser-Ney)": dataclasses.replace(
        baseline("ngram", BaselineConfig(ngram_order=3, smoothing="kneser_ney")),
        train=dataclasses.replace(fast, steps=1),
    ),
    "6-gram (Kneser-Ney)": dataclasses.replace(
        baseline("ngram", BaselineConfig(ngram_order=6, smoothing="kneser_ney")),
        train=dataclasses.replace(fast, steps=1),
    ),
    "fixed-window (Bengio 2003)": baseline(
        "window_lm",
        BaselineConfig(window=ablation.pick(smoke=4, full=16), direct=False),
        d_model=ablation.pick(smoke=8, full=48),
        d_ff=ablation.pick(smoke=32, full=960),
        n_layers=1,
        tie_embeddings=False,
        dropout=0.0,
        init_std=1.0,
    ),
    "LSTM (2 layers)": baseline(
        "rnn_lm",
        BaselineConfig(cell="lstm"),
        d_model=ablation.pick(smoke=16, full=222),
        n_layers=2,
        tie_embeddings=True,
        dropout=0.0,
        init_std=1.0,
    ),
    "Transformer": transformer,
}
curves = {name: ablation.train_curves(cfg, name.split()[0].lower(), NOTEBOOK) for name, cfg in configs.items()}

# %%
rows = {}
for name, c in curves.items():
    s = c.summary
    rows[name] = {
        "val perplexity": math.exp(c.final_val) if c.val_loss else s.get("val_perplexity"),
        "parameters": s.get("params"),
        "train seconds": s.get("wall_s"),
        "tokens/s": s.get("tokens_per_s"),
    }
    print(f"{name:28s}", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[name].items()})

fig, axes = plt.subplots(1, 3, figsize=(16, 4))
names = list(rows)
axes[0].barh(names, [rows[n]["val perplexity"] for n in names])
axes[0].set(xlabel="validation perplexity (per character)", title="Quality")
neural = [n for n in names if "gram" not in n]
axes[1].barh(neural, [rows[n]["tokens/s"] or 0 for n in neural])
axes[1].set(xlabel="training tokens / s", title="Speed")
for n in neural:
    axes[2].plot(curves[n].steps, curves[n].train_loss, label=n)
axes[2].set(xlabel="step", ylabel="train loss (nats/char)", title="Learning curves")
axes[2].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Verdict

# %%
ppl = {n: rows[n]["val perplexity"] for n in rows}
best_ngram = min((ppl[n], n) for n in rows if "gram" in n)[1]
win, lstm, tf = "fixed-window (Bengio 2003)", "LSTM (2 layers)", "Transformer"
tps = {n: rows[n]["tokens/s"] for n in (lstm, tf)}
table = ablation.verdict_table(
    [
        (
            "A neural fixed-window LM beats the n-gram",
            f"window {ppl[win]:.3f} vs {best_ngram} {ppl[best_ngram]:.3f}",
            ablation.verdict(ppl[win] < ppl[best_ngram]),
        ),
        (
            "An RNN beats the fixed-window LM",
            f"LSTM {ppl[lstm]:.3f} vs window {ppl[win]:.3f}",
            ablation.verdict(ppl[lstm] < ppl[win]),
        ),
        (
            "The Transformer beats the RNN at about the same parameters and steps",
            f"Transformer {ppl[tf]:.3f} ({rows[tf]['parameters']:,} params) vs LSTM {ppl[lstm]:.3f} "
            f"({rows[lstm]['parameters']:,} params)",
            ablation.verdict(ppl[tf] < ppl[lstm]),
        ),
        (
            "The Transformer trains faster than the RNN",
            " vs ".join("n/a" if tps[k] is None else f"{tps[k]:,.0f}" for k in (tf, lstm)) + " tokens/s",
            ablation.verdict(None if None in tps.values() else tps[tf] > tps[lstm]),
        ),
    ]
)
print(table)
out = ablation.save_results(
    NOTEBOOK, {"rows": rows, "curves": curves, "verdicts": table}, figures={"comparison": fig}, configs=configs
)
print("results in", out)
