"""The neural baselines through the Transformer's entry points: ``train.loop.train`` (jitted steps,
checkpoints, validation perplexity), evaluation by ``setup`` + ``evaluate`` (what ``eval`` runs)
and sampling from the restored run with ``decode.generate`` (what ``sample`` runs)."""

import random

import jax
import numpy as np
import pytest

from transformer_jax.data import DataConfig, TextData
from transformer_jax.decode import Greedy, TopK, generate
from transformer_jax.eval.evaluate import evaluate, make_eval_step
from transformer_jax.models import RNNLMConfig, WindowLMConfig, baseline_model_config
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.config import CheckpointConfig, Config, EvalConfig, LogConfig, TrainConfig
from transformer_jax.train.loop import train
from transformer_jax.train.optim import OptimConfig
from transformer_jax.train.run import setup

from .test_baselines_rnn import _tokens

MODELS = {
    "window_lm": dict(baseline=WindowLMConfig(window=4, direct=True), d_model=8, d_ff=16, n_layers=1),
    "rnn_lm": dict(baseline=RNNLMConfig(cell="lstm", tbptt=8), d_model=16, n_layers=2, dropout=0.1),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(1)
    words = ["the", "king", "queen", "sword", "crown", "night", "love", "war", "rome", "fool"]
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(100)))
    return str(path), str(tmp_path_factory.mktemp("tfds"))


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_trains_evaluates_and_samples_like_a_transformer(kind, corpus, tmp_path):
    kw = dict(MODELS[kind])
    model = baseline_model_config(kind, kw.pop("baseline"), **kw)
    path, cache = corpus
    cfg = Config(
        model=model,
        data=DataConfig(dataset=TextData(path=path, cache_dir=cache), seq_len=16),
        train=TrainConfig(
            steps=3,
            batch_size=8,
            eval=EvalConfig(every=3, batches=2),
            log=LogConfig(every=1, peak_flops=1e12),  # no GEMM peak measurement
            checkpoint=CheckpointConfig(every=3),
            optim=OptimConfig(lr=3e-3, warmup_steps=1),
        ),
    )
    summary = train(cfg, str(tmp_path), devices=jax.devices()[:1])
    assert summary["step"] == 3 and np.isfinite(summary["val_loss"]) and summary["params"] > 0
    run, _ = setup(cfg, str(tmp_path), devices=jax.devices()[:1])
    eval_step = jax.jit(make_eval_step(run.graphdef, FORWARDS.get("lm")))
    again = evaluate(eval_step, run.state, run.data.eval_batches("val", 2), run.put_batch)
    run.checkpoints.close()
    assert again["loss"] == pytest.approx(summary["val_loss"], rel=1e-5)
    params = jax.device_get((run.state.params, run.state.model_state))
    prompt = np.asarray([run.data.tokenizer.encode("the ")])
    for sampling in (Greedy(), TopK(k=3)):
        out = generate(
            run.graphdef,
            params,
            prompt_BP=prompt,
            max_new_tokens=10,
            sampling=sampling,
        )
        tokens = _tokens(out)
        assert tokens.shape == (1, 10) and tokens.min() >= 0 and tokens.max() < run.data.vocab_size
