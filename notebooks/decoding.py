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
# # Decoding: greedy, top-k, top-p, beam search, and the KV cache
#
# **Claims** (the notes; Holtzman et al. 2020; Wu et al. 2016):
# 1. Beam search finds translations that score better than greedy decoding (higher BLEU).
# 2. Sampling (top-k, top-p) trades quality for diversity: lower BLEU, more varied output.
# 3. Beam search with a length penalty does not produce shorter output than greedy.
# 4. With a KV cache each new token costs about the same at any position (O(n) work for n
#    tokens); recomputing the whole prefix makes the cost per token grow with the position
#    (O(n^2) in total).
#
# FULL mode uses the Multi30k De->En model of `experiments/multi30k_de_en.py`: the run in
# `TRANSFORMER_JAX_MT_RUN` (default `runs/mt`), trained first if it does not exist (about two
# hours on two CPU cores). SMOKE mode trains a tiny model on a synthetic reversal task.

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
import pathlib

import jax
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.benchmarks.decode import per_token_times
from transformer_jax.data import DataConfig
from transformer_jax.decode import SamplingConfig
from transformer_jax.eval import TranslateConfig, reference_pairs, translate_ids
from transformer_jax.eval.bleu import corpus_bleu
from transformer_jax.models import build_model, get_preset
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.experiment import load_experiment, workdir_config
from transformer_jax.train.loop import train
from transformer_jax.train.run import setup

NOTEBOOK = "decoding"
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| devices:", jax.devices())

# %%
if ablation.smoke():
    cfg = Config(
        name="decoding_smoke",
        model=get_preset("original_tiny", vocab_size=16, dropout=0.0, n_layers=1, n_encoder_layers=1),
        data=DataConfig(
            dataset="reverse",
            task_format="seq2seq",
            synthetic_vocab=10,
            synthetic_min_len=2,
            synthetic_max_len=6,
            synthetic_val_size=32,
            max_src_len=8,
            seq_len=8,
        ),
        train=TrainConfig(steps=40, batch_size=16, eval_every=40, log_every=10, checkpoint_every=40, sample_tokens=0),
    )
    workdir = ablation.runs_dir(NOTEBOOK) / "reverse"
    train(cfg, str(workdir))
else:
    workdir = pathlib.Path(os.environ.get("TRANSFORMER_JAX_MT_RUN", ablation.repo_root() / "runs" / "mt"))
    if not (workdir / "checkpoints").is_dir():
        train(load_experiment(str(ablation.repo_root() / "experiments" / "multi30k_de_en.py")), str(workdir))
run, _ = setup(workdir_config(str(workdir)), str(workdir), best=not ablation.smoke())
run.checkpoints.close()
params = (run.state.params, run.state.model_state)
sources, refs = reference_pairs(run.data, "val", ablation.pick(smoke=32, full=None))
print(f"{len(sources)} validation sentences from {workdir}")

# %% [markdown]
# ## Strategies on the validation split
# Distinct-2: distinct word bigrams over all bigrams of the output. Seed agreement: the share of
# sentences translated identically with two different seeds (1 for deterministic strategies).

# %%
n_new = run.cfg.data.seq_len
strategies = {
    "greedy": TranslateConfig(beam_size=1),
    "top-k (k=10)": TranslateConfig(beam_size=1, sampling=SamplingConfig("top_k", top_k=10)),
    "top-p (p=0.9)": TranslateConfig(beam_size=1, sampling=SamplingConfig("top_p", top_p=0.9)),
    "beam 4": TranslateConfig(beam_size=4, alpha=0.6),
}


def distinct2(texts) -> float:
    bigrams = [tuple(w[i : i + 2]) for w in (t.split() for t in texts) for i in range(len(w) - 1)]
    return len(set(bigrams)) / max(len(bigrams), 1)


results, examples = {}, {}
for name, tc in strategies.items():
    tc = dataclasses.replace(tc, max_src_len=run.cfg.data.max_src_len, max_new_tokens=n_new)
    outs = [
        [
            run.data.tokenizer.decode(x).replace("\n", " ")
            for x in translate_ids(run.graphdef, params, sources, dataclasses.replace(tc, seed=seed))
        ]
        for seed in (0, 1)
    ]
    results[name] = {
        "bleu": corpus_bleu(outs[0], refs)["bleu"],
        "mean words": float(np.mean([len(h.split()) for h in outs[0]])),
        "distinct-2": distinct2(outs[0]),
        "seed agreement": float(np.mean([a == b for a, b in zip(*outs)])),
    }
    examples[name] = outs[0][:3]
    print(f"{name:14s}", {k: round(v, 3) for k, v in results[name].items()})
print("reference words:", round(float(np.mean([len(r.split()) for r in refs])), 2))
for i in range(2):
    print("\nreference:", refs[i])
    for name in strategies:
        print(f"{name:>14s}:", examples[name][i])

fig_strat, axes = plt.subplots(1, 3, figsize=(14, 3.5))
for ax, key in zip(axes, ("bleu", "mean words", "distinct-2")):
    ax.bar(list(results), [results[n][key] for n in results])
    ax.set(title=key)
    ax.tick_params(axis="x", labelrotation=20)
plt.show()

# %% [markdown]
# ## KV cache vs recomputation
# A decoder-only model (torch_gpt's `small`: 4 layers, d_model 128): milliseconds per new token
# after a prefix of p tokens, with the cache (difference of two generation lengths, so the prefill
# cancels) and without (one forward pass over the whole prefix).

# %%
positions = ablation.pick(smoke=(16, 32), full=(64, 128, 256, 512, 1024))
lm = build_model(dataclasses.replace(get_preset("nanogpt_char"), max_len=2 * max(positions) + 256, dropout=0.0))
times = per_token_times(
    lm, positions, k=ablation.pick(smoke=(4, 12), full=(16, 112)), reps=ablation.pick(smoke=2, full=7)
)
fig_cache, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(positions, [times["cached_ms"][p] for p in positions], "o-", label="KV cache")
ax.loglog(positions, [times["recompute_ms"][p] for p in positions], "o-", label="recompute the prefix")
ax.set(xlabel="position p", ylabel="ms per new token", title="Cost of one decoding step")
ax.legend()
plt.show()
cache_ratio = times["cached_ms"][positions[-1]] / times["cached_ms"][positions[0]]
recompute_ratio = times["recompute_ms"][positions[-1]] / times["recompute_ms"][positions[0]]
print(
    f"last/first position: cached {cache_ratio:.2f}x, recompute {recompute_ratio:.2f}x "
    f"(positions grow {positions[-1] / positions[0]:.0f}x)"
)

# %% [markdown]
# ## Verdict

# %%
g, b = results["greedy"], results["beam 4"]
samplers = ("top-k (k=10)", "top-p (p=0.9)")
table = ablation.verdict_table(
    [
        (
            "Beam search beats greedy",
            f"BLEU beam 4 {b['bleu']:.2f} vs greedy {g['bleu']:.2f}",
            ablation.verdict(b["bleu"] > g["bleu"]),
        ),
        (
            "Sampling trades quality for diversity",
            "; ".join(
                f"{n}: BLEU {results[n]['bleu']:.2f}, distinct-2 {results[n]['distinct-2']:.3f}, "
                f"seed agreement {results[n]['seed agreement']:.2f}"
                for n in samplers
            )
            + f" (greedy: {g['bleu']:.2f}, {g['distinct-2']:.3f})",
            ablation.verdict(
                all(results[n]["bleu"] < g["bleu"] and results[n]["seed agreement"] < 1 for n in samplers)
            ),
        ),
        (
            "Beam search with a length penalty does not shorten the output",
            f"mean words beam {b['mean words']:.2f}, greedy {g['mean words']:.2f}",
            ablation.verdict(b["mean words"] >= g["mean words"] - 0.1),
        ),
        (
            "With a KV cache the cost per token stays flat; recomputation grows",
            f"cost at position {positions[-1]} over {positions[0]}: cached {cache_ratio:.2f}x, "
            f"recompute {recompute_ratio:.2f}x",
            ablation.verdict(cache_ratio < 1.5 and recompute_ratio > 2 * cache_ratio),
        ),
    ]
)
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {"strategies": results, "examples": examples, "per_token_ms": times, "verdicts": table},
    figures={"strategies": fig_strat, "kv_cache": fig_cache},
    configs={"run": run.cfg},
)
print("results in", out)
