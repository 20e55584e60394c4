"""Fitting, evaluating and sampling the count-based n-gram LM (``model.kind="ngram"``).

The n-gram goes through the same data pipeline as the neural models: the tokenizer is trained on
the training split, counts come from the training split's token stream (``stream`` packing: the
whole split as one sequence; ``documents``: every packed segment, BOS/EOS included), and
evaluation scores exactly the rows, targets and weights that ``transformer-jax eval`` scores for a
neural run (``data.eval_batches(split)``), each target conditioned on the preceding tokens of its
row and segment (so the first tokens of a stream window see a shorter history, as a Transformer
does). A workdir holds ``ngram.npz`` (counts), ``config.json``, ``tokenizer/`` and
``metrics.jsonl``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import numpy as np

from transformer_jax.core import configlib
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.core.paths import local_copy, local_output, user_path
from transformer_jax.data import build_data, load_tokenizer
from transformer_jax.data.lm import StreamLM
from transformer_jax.decode import Greedy, Sample, SamplingConfig, TopK, TopP
from transformer_jax.eval.sampling import check_prompt
from transformer_jax.models.baselines.config import NgramConfig
from transformer_jax.models.baselines.ngram import NGramLM
from transformer_jax.train.config import Config
from transformer_jax.train.entry import ENTRY_POINTS, EntryPoint
from transformer_jax.train.experiment import workdir_config
from transformer_jax.train.metrics import MetricsWriter, logger_settings

NGRAM_FILE = "ngram.npz"


def training_sequences(data, split: str = "train") -> list[np.ndarray]:
    """The token sequences of ``split`` that n-grams are counted in (none crosses a boundary)."""
    if isinstance(data.pipeline, StreamLM):
        return [np.asarray(data.pipeline.tokens(split), np.int64)]
    seqs = []
    for batch in data.eval_batches(split):
        for inputs, targets, seg in zip(batch["inputs"], batch["targets"], batch["segment_ids"]):
            for s in np.unique(seg[seg > 0]):
                idx = np.flatnonzero(seg == s)
                seqs.append(np.concatenate([inputs[idx], targets[idx[-1:]]]).astype(np.int64))
    return seqs


def score(model: NGramLM, batches, *, accuracy: bool = True) -> dict[str, float]:
    """Token-weighted loss (mean NLL), perplexity, accuracy over LM batches, as ``train.evaluate``."""
    nll = weight = correct = 0.0
    for batch in batches:
        w = np.asarray(batch["weights"], np.float64)
        if not w.any():
            continue
        logp, best = model.row_log_probs(batch["inputs"], batch["targets"], batch["segment_ids"], with_argmax=accuracy)
        nll -= float(np.sum(np.where(w > 0, logp, 0.0) * w))
        weight += float(w.sum())
        if accuracy:
            correct += float(np.sum((best == batch["targets"]) * w))
    if weight == 0:
        raise ValueError("the evaluation split produced no tokens")
    loss = nll / weight
    out = {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": weight}
    if accuracy:
        out["accuracy"] = correct / weight
    return out


def _fit(cfg: Config, data) -> NGramLM:
    b = cfg.model.baseline
    assert isinstance(b, NgramConfig)  # ModelConfig requires it for this kind
    return NGramLM.fit(
        training_sequences(data), vocab_size=data.vocab_size, order=b.ngram_order, **b.smoothing.fit_kwargs()
    )


def train_ngram(cfg: Config, workdir: str) -> dict[str, Any]:
    """Counts the training split, scores train (``train.eval.batches`` rows at most) and val, and
    saves the model; returns the summary keys of ``train.loop.train`` (``params`` = stored counts,
    ``tokens_per_s`` = training tokens counted per second)."""
    t_start = time.time()
    if jax.process_count() > 1:
        raise ValueError(
            "model.kind='ngram' is fitted by a single process (numpy counts); "
            "run it without --num-processes / --coordinator"
        )
    root = user_path(workdir, "--workdir")  # a gs:// workdir where the environment provides it
    root.mkdir(parents=True, exist_ok=True)
    data = build_data(cfg.data, batch_size=cfg.train.batch_size)
    if cfg.model.dims.vocab_size != data.vocab_size:
        cfg = apply_overrides(cfg, [f"model.dims.vocab_size={data.vocab_size}"])
    (root / "config.json").write_text(configlib.to_json(cfg))
    data.tokenizer.save(root / "tokenizer")
    n_train = sum(len(s) for s in training_sequences(data))
    t_fit = time.time()
    model = _fit(cfg, data)
    fit_s = time.time() - t_fit
    with local_output(root / NGRAM_FILE) as local:  # numpy writes a local file, copied to a URL workdir
        model.save(local)
    print(
        f"model: ngram (order {model.order}, {model.smoothing}), {model.n_entries:,} stored counts from "
        f"{n_train:,} training tokens in {fit_s:.1f}s; data: {cfg.data.dataset.kind} (vocab {data.vocab_size})",
        flush=True,
    )
    train = score(model, data.eval_batches("train", cfg.train.eval.batches), accuracy=False)
    val = score(model, data.eval_batches("val", cfg.train.eval.batches))
    with MetricsWriter(workdir, **logger_settings(cfg)) as writer:
        writer.write(
            0,
            {
                "train/loss": train["loss"],
                "train/perplexity": train["perplexity"],
                **{f"val/{k}": v for k, v in val.items()},
            },
        )
    print("step 0: " + ", ".join(f"val {k} {v:.4f}" for k, v in val.items() if k != "tokens"), flush=True)
    return {
        "step": 0,
        "train_loss": train["loss"],
        "val_loss": val["loss"],
        "val_perplexity": val["perplexity"],
        "val_accuracy": val["accuracy"],
        "tokens_per_s": n_train / max(fit_s, 1e-9),
        "compile_s": None,
        "wall_s": time.time() - t_start,
        "params": model.n_entries,
        "stopped": "fitted",
        "skipped_steps": 0,
    }


def load_ngram(workdir: str, overrides: list[str] | None = None) -> tuple[Config, NGramLM, Any]:
    """(config with ``overrides`` applied, model, tokenizer) of an n-gram run."""
    cfg = workdir_config(workdir, overrides)
    root = user_path(workdir, "--workdir")
    path = root / NGRAM_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: train the n-gram first (transformer-jax train)")
    with local_copy(path) as local:
        model = NGramLM.load(local)
    return cfg, model, load_tokenizer(root / "tokenizer")


def evaluate_ngram(
    workdir: str, split: str = "val", max_batches: int | None = None, overrides: list[str] | None = None
) -> dict[str, Any]:
    """Loss, perplexity and accuracy of an n-gram run on ``split`` (the rows ``eval`` scores;
    ``overrides`` such as ``data.seq_len=256`` change the rows, not the counts)."""
    cfg, model, tokenizer = load_ngram(workdir, overrides)
    data = build_data(cfg.data, batch_size=cfg.train.batch_size, tokenizer=tokenizer)
    split = "val" if split == "validation" else split
    if split not in data.splits:
        raise ValueError(f"--split {split}: this dataset has splits {', '.join(data.splits)}")
    return {"split": split, "step": 0, **score(model, data.eval_batches(split, max_batches))}


def pick_next(probs_V: np.ndarray, rng: np.random.Generator, sampling: SamplingConfig) -> int:
    """The rules of ``decode.strategies`` on probabilities: `Greedy` (argmax); `Sample`, `TopK` (the
    k most likely; ``uniform``: each of them alike) and `TopP` (the smallest set reaching p) draw
    from ``p^(1/temperature)``."""
    if isinstance(sampling, Greedy):
        return int(np.argmax(probs_V))
    if not isinstance(sampling, Sample | TopK | TopP):
        raise ValueError(f"{sampling!r}: the n-gram samples with Greedy, Sample, TopK or TopP")
    logits = np.log(np.maximum(probs_V, 1e-300)) / sampling.temperature
    if isinstance(sampling, TopK):
        logits = np.where(logits < np.sort(logits)[-min(sampling.k, len(logits))], -np.inf, logits)
        if sampling.uniform:
            logits = np.where(np.isfinite(logits), 0.0, -np.inf)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    if isinstance(sampling, TopP):
        order = np.argsort(-p)
        keep = np.zeros(len(p), bool)
        keep[order] = np.cumsum(p[order]) - p[order] < sampling.p
        p = np.where(keep, p, 0.0)
        p /= p.sum()
    return int(rng.choice(len(p), p=p))


def sample_ngram(
    workdir: str,
    *,
    prompt: str = "\n",
    max_new_tokens: int = 200,
    sampling: SamplingConfig = TopK(),
    seed: int = 0,
) -> str:
    """Continues ``prompt`` token by token from P(. | last n - 1 tokens) until ``max_new_tokens``
    or EOS (the keywords of ``cli.sample.sample_text``)."""
    _, model, tok = load_ngram(workdir)
    check_prompt(tok, prompt)
    ids = tok.encode(prompt) or [tok.bos_id]
    rng = np.random.default_rng(seed)
    new: list[int] = []
    n_hist = model.order - 1
    for _ in range(max_new_tokens):
        history = (ids + new)[-n_hist:] if n_hist else []
        nxt = pick_next(model.distribution(history), rng, sampling)
        if nxt == tok.eos_id:
            break
        new.append(nxt)
    return prompt + tok.decode(new)


ENTRY_POINTS.register("ngram", EntryPoint(train=train_ngram, evaluate=evaluate_ngram, sample=sample_ngram))
