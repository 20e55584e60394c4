"""``eval --workdir RUN --corpus ... --tasks ...`` on a tiny char-level run: a BOS before each context
(as the training rows have), log-likelihoods as a plain forward pass of the run's model gives them."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

from tests.cli_helpers import cli, train

DOCS = [  # at most 33 characters with the BOS: within the model's 32 learned positions, nothing cut
    {"goal": "egg", "sol1": "boil it", "sol2": "hat", "label": 0},
    {"goal": "door", "sol1": "push", "sol2": "sing alot", "label": 1},
]
TEXT = "to be or not to be, that is"  # fewer characters than the model's 32 positions: one window


def _forward(workdir):
    """``logp(tokens)``: log p(tokens[t+1] | tokens[:t+1]) from the run's model, one unpadded sequence."""
    from flax import nnx

    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(workdir_config(str(workdir)), str(workdir), devices=jax.devices()[:1])
    run.checkpoints.close()
    model = nnx.merge(run.graphdef, run.state.params, run.state.model_state)

    def logp(tokens: list[int]) -> np.ndarray:
        logits = np.asarray(model(np.asarray([tokens[:-1]], np.int32))[0][0], np.float64)
        top = logits.max(-1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        return logp[np.arange(len(tokens) - 1), tokens[1:]]

    return logp


def test_eval_workdir_corpus_and_tasks(tmp_path):
    from transformer_jax.data import load_tokenizer

    workdir = tmp_path / "run"
    train(workdir, "train.steps=2")
    (tmp_path / "piqa.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "corpus.txt").write_text(TEXT)
    proc = cli("eval", "--workdir", str(workdir), "--corpus", str(tmp_path / "corpus.txt"),
               "--tasks", f"piqa={tmp_path / 'piqa.jsonl'}")  # fmt: skip
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    tok = load_tokenizer(str(workdir / "tokenizer"))
    ids = tok.encode(TEXT)
    forward_logp = _forward(workdir)
    nll = -forward_logp([tok.bos_id, *ids]).sum()
    assert got["corpus"]["tokens"] == len(ids)
    assert got["corpus"]["perplexity"] == pytest.approx(math.exp(nll / len(ids)), rel=1e-4)
    hits = []
    for d in DOCS:
        context = [tok.bos_id, *tok.encode(f"Question: {d['goal']}\nAnswer:")]
        assert len(context) + len(d["sol1"]) + 1 <= 33 and len(context) + len(d["sol2"]) + 1 <= 33
        lls = [forward_logp(context + tok.encode(" " + s))[len(context) - 1 :].sum() for s in (d["sol1"], d["sol2"])]
        hits.append(
            (
                int(np.argmax(lls)) == d["label"],
                int(np.argmax(np.divide(lls, [len(d["sol1"]), len(d["sol2"])]))) == d["label"],
            )
        )
    assert (got["piqa"]["acc"], got["piqa"]["acc_norm"]) == pytest.approx(tuple(np.mean(hits, axis=0)))
