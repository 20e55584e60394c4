"""Per-source loss of a data mixture: the train step's and the eval step's sums per source equal a
numpy recomputation from per-row losses (float64 log-softmax of the same logits), with gradient
accumulation; ``reduce_metrics`` and ``evaluate`` turn the sums into ``loss/NAME``."""

import os

import jax
import numpy as np
from flax import nnx

from transformer_jax.core.overrides import apply_overrides
from transformer_jax.eval.evaluate import evaluate, make_eval_step
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.actions import reduce_metrics
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.run import setup
from transformer_jax.train.step import make_train_step

EXPERIMENT = os.path.join(os.path.dirname(__file__), "tiny_experiment.py")
NAMES = ("web", "code", "math")


def _row_nll(run, state, batch) -> tuple[np.ndarray, np.ndarray]:
    """(NLL sum, weight sum) per row, in float64 from the model's logits."""
    model = nnx.merge(run.graphdef, state.params, state.model_state)
    logits, _ = FORWARDS.get("lm").forward(model, batch, None)
    logits = np.asarray(logits, np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nll_BT = -np.take_along_axis(logp, np.asarray(batch["targets"])[..., None], -1)[..., 0]
    w_BT = np.asarray(batch["weights"], np.float64)
    return (nll_BT * w_BT).sum(-1), w_BT.sum(-1)


def test_per_source_loss_equals_numpy_from_per_row_losses(tmp_path):
    cfg = apply_overrides(load_experiment(EXPERIMENT), ["train.grad_accum=2", "model.dropout=0.0"])
    run, _ = setup(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    task = FORWARDS.get("lm")
    batch = dict(next(run.data.train_iterator()))
    B = batch["inputs"].shape[0]
    batch["weights"][1, :8] = 0  # rows of unequal weight
    batch["source_ids"] = np.array([2, 0, 2, 0][:B], np.int32)  # source 1 has no rows
    row_nll, row_w = _row_nll(run, run.state, batch)
    want_nll = np.bincount(batch["source_ids"], row_nll, minlength=3)
    want_w = np.bincount(batch["source_ids"], row_w, minlength=3)

    step = jax.jit(make_train_step(run.graphdef, run.tx, task, run.cfg.train, run.schedule, n_sources=3))
    _, metrics = jax.device_get(step(run.state, batch, jax.random.key(0)))
    np.testing.assert_allclose(metrics["source/loss_sum"], want_nll, rtol=1e-5)
    np.testing.assert_array_equal(metrics["source/weight_sum"], want_w)
    np.testing.assert_allclose(metrics["source/loss_sum"].sum(), metrics["loss_sum"], rtol=1e-5)

    logged = reduce_metrics([metrics, metrics], NAMES)
    assert "loss/code" not in logged and "source/loss_sum" not in logged  # no targets of code
    for i in (0, 2):
        np.testing.assert_allclose(logged[f"loss/{NAMES[i]}"], want_nll[i] / want_w[i], rtol=1e-5)

    eval_step = jax.jit(make_eval_step(run.graphdef, task, n_sources=3))
    result = evaluate(eval_step, run.state, [batch, batch], lambda b: b, NAMES)
    for i in (0, 2):
        np.testing.assert_allclose(result[f"loss/{NAMES[i]}"], want_nll[i] / want_w[i], rtol=1e-5)
    assert "loss/code" not in result
    run.checkpoints.close()
