"""Validation BLEU through training: a tiny encoder-decoder learns to copy, validation BLEU says
so, and the checkpoint kept as best by BLEU is the step whose logged BLEU is the highest.

One in-process run (one CPU device) of the original Transformer at 1+1 layers, d_model 32, on
the synthetic copy task as seq2seq (symbols 0..7, 3-6 per sentence, 32 validation sentences),
greedy validation BLEU every 25 steps, best checkpoint by BLEU (``train.checkpoint.best``). Measured (jax
0.10.2, CPU): BLEU 2.9, 28, 77, 97, 100, 100 at steps 25..150; the untrained model 0.4.
"""

import math

import jax
import pytest

from transformer_jax.data import CopyTask, DataConfig
from transformer_jax.eval import validation_bleu
from transformer_jax.models import get_preset
from transformer_jax.train.config import (
    BestCheckpoint,
    CheckpointConfig,
    Config,
    EvalConfig,
    LogConfig,
    SampleConfig,
    TrainConfig,
)
from transformer_jax.train.loop import train
from transformer_jax.train.metrics import read_metrics
from transformer_jax.train.optim import AdamW, CosineSchedule, OptimConfig
from transformer_jax.train.run import setup

pytestmark = pytest.mark.slow

ONE = jax.devices()[:1]
EVAL_EVERY, STEPS = 25, 150
# The trained model reaches 100 by step 125 (97 at step 100): 90 leaves ten BLEU points for
# platform differences, while an untrained model (0.4) and the trained one scored on its outputs
# reversed (15: the right symbols in the wrong order) stay far below it.
TRAINED_BLEU, UNTRAINED_BLEU = 90.0, 10.0


def copy_config() -> Config:
    return Config(
        name="copy_bleu",
        model=get_preset(
            "original_tiny", dropout=0.0, d_model=32, n_heads=2, d_ff=64, n_layers=1, n_encoder_layers=1, max_len=16
        ),
        data=DataConfig(
            dataset=CopyTask(
                format="seq2seq", vocab=8, min_len=3, max_len=6, train_size=4000, val_size=32, max_src_len=8
            ),
            seq_len=8,
        ),
        train=TrainConfig(
            steps=STEPS,
            batch_size=128,
            eval=EvalConfig(every=EVAL_EVERY),
            checkpoint=CheckpointConfig(every=EVAL_EVERY, best=BestCheckpoint(metric="bleu", mode="max")),
            log=LogConfig(every=EVAL_EVERY, peak_flops=1e12),  # no GEMM measurement for the MFU column
            sample=SampleConfig(tokens=0),
            optim=OptimConfig(AdamW(weight_decay=0.0), lr=3e-3, schedule=CosineSchedule(min_lr=3e-4), warmup_steps=10),
        ),
    )


def test_copy_model_learns_and_the_best_checkpoint_is_the_highest_logged_bleu(tmp_path):
    # One test, not two on a module fixture: under pytest-xdist each worker would train its own.
    workdir = str(tmp_path / "copy_bleu")
    run, _ = setup(copy_config(), workdir, devices=ONE)  # the step-0 state; compiles what training reuses
    try:
        untrained = validation_bleu(run, run.state, "val")["bleu"]
    finally:
        run.checkpoints.close()
    summary = train(copy_config(), workdir, devices=ONE)
    logged = {r["step"]: r["val/bleu"] for r in read_metrics(workdir) if "val/bleu" in r}

    # BLEU measures the learning: high after training, near zero before
    assert sorted(logged) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)), logged
    assert summary["val_bleu"] == logged[STEPS]
    assert logged[STEPS] > TRAINED_BLEU, logged
    assert untrained < UNTRAINED_BLEU, untrained

    # best/ holds the step of the highest logged BLEU; it changes only on a strict improvement,
    # so on a tie it is the first step that reached the maximum
    top = max(logged.values())
    want = min(step for step, bleu in logged.items() if bleu == top)
    assert want != max(logged), f"the run no longer tells best from last (BLEU by step {logged}); retune it"
    run, _ = setup(copy_config(), workdir, devices=ONE, best=True)
    try:
        assert run.checkpoints.steps(best=True) == [want], (run.checkpoints.steps(best=True), logged)
        meta = run.checkpoints.restore_meta(best=True)
        assert meta["step"] == want and math.isclose(meta["best_value"], top, rel_tol=1e-9), (meta, logged)
        # the parameters kept there are that step's: they score the logged BLEU again
        assert int(jax.device_get(run.state.step)) == want
        again = validation_bleu(run, run.state, "val")["bleu"]
    finally:
        run.checkpoints.close()
    assert math.isclose(again, top, rel_tol=1e-6), (again, logged)
