"""Non-finite loss or gradients: ``skip`` drops the update, counts and halts after N in a row;
``halt`` stops naming the step and the parameters; a non-finite state is never checkpointed."""

import os

import jax
import numpy as np
import pytest

from tests.cli_helpers import train
from transformer_jax.data.pipeline import Data
from transformer_jax.train.actions import NonFiniteError
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.loop import train as train_in_process

pytestmark = pytest.mark.slow
TINY = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")


def test_skip_policy_counts_and_halts_after_n_in_a_row(tmp_path):
    summary, proc = train(
        tmp_path / "run",
        "train.optim.lr=1e300",
        "train.optim.grad_clip=None",
        "train.optim.warmup_steps=0",
        "train.nonfinite=skip",
        "train.max_consecutive_skips=3",
        "train.steps=20",
        "train.checkpoint_every=1",
        check=False,
    )
    assert proc.returncode == 2 and summary is None
    assert "3 consecutive non-finite steps" in proc.stderr, proc.stderr[-2000:]
    assert "update skipped" in proc.stderr  # each skip is reported
    # Skipped steps keep the (finite) old parameters; no checkpoint ever holds a non-finite state.
    for step in os.listdir(tmp_path / "run" / "checkpoints"):
        assert step.isdigit()


def _poisoned_iterator(at_step: int):
    original = Data.train_iterator

    def train_iterator(self, state=None):
        it = original(self, state)
        calls = {"n": 0}
        real_next = it.__next__

        class Poisoned:
            def __next__(self):
                batch = real_next()
                calls["n"] += 1
                if calls["n"] == at_step:
                    batch = dict(batch, weights=np.full_like(batch["weights"], np.nan))
                return batch

            def __getattr__(self, name):
                return getattr(it, name)

        return Poisoned()

    return train_iterator


def test_halt_policy_names_step_and_parameters_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(Data, "train_iterator", _poisoned_iterator(at_step=3))
    cfg = load_experiment(TINY, ["train.nonfinite=halt", "train.steps=6", "train.checkpoint_every=2"])
    with pytest.raises(NonFiniteError) as err:
        train_in_process(cfg, str(tmp_path / "run"), devices=jax.devices()[:1])
    message = str(err.value)
    assert message.startswith("step 3:") and "non-finite gradients in" in message
    assert "['embed']['embedding']" in message or "embed" in message
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == ["2"]
