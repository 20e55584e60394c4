"""Non-finite loss or gradients: ``skip`` drops the update, counts and halts after N in a row;
``halt`` stops naming the step and the parameters; a non-finite state is never checkpointed."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.cli_helpers import nonfinite_leaves, saved_states, train
from transformer_jax.data.pipeline import Data
from transformer_jax.models.forward import FORWARDS
from transformer_jax.train.actions import NonFiniteError
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.loop import train as train_in_process

pytestmark = pytest.mark.slow
TINY = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")


def _assert_every_checkpoint_finite(states: dict) -> None:
    """Parameters, model state and optimizer state of every checkpoint are finite."""
    for name, state in states.items():
        for part in ("params", "model_state", "opt_state"):
            bad = nonfinite_leaves(state[part])
            assert not bad, f"{name} holds non-finite {part} ({len(bad)} leaves): {bad[:3]}"


def test_skip_policy_counts_and_halts_after_n_in_a_row(tmp_path):
    summary, proc = train(
        tmp_path / "run",
        "train.optim.lr=1e300",
        "train.optim.grad_clip=None",
        "train.optim.warmup_steps=0",
        "train.nonfinite=skip",
        "train.nonfinite.max_consecutive=3",
        "train.steps=20",
        "train.checkpoint.every=1",
        check=False,
    )
    assert proc.returncode == 2 and summary is None
    assert "3 consecutive non-finite steps" in proc.stderr, proc.stderr[-2000:]
    assert "update skipped" in proc.stderr  # each skip is reported
    # Every update overflows, so every step is skipped; steps 1 and 2 are checkpointed, step 3 halts
    # before its checkpoint. Each checkpoint, restored, is finite and still the initial state.
    states = saved_states(tmp_path / "run")
    assert sorted(states) == ["checkpoints/1", "checkpoints/2"], sorted(states)
    _assert_every_checkpoint_finite(states)
    for step in (1, 2):
        state = states[f"checkpoints/{step}"]
        assert int(state["step"]) == int(state["skips"]) == int(state["total_skips"]) == step
    one, two = states["checkpoints/1"], states["checkpoints/2"]
    for part in ("params", "opt_state"):  # a skipped step changes neither
        for x, y in zip(jax.tree.leaves(one[part]), jax.tree.leaves(two[part])):
            np.testing.assert_array_equal(x, y)


# One parameter whose gradient (and only its gradient) becomes NaN when the batch is marked.
POISONED = "['layers']['layers'][1]['ffn']['w_out']['kernel']"


@jax.custom_vjp
def _nan_gradient(x, poison):
    return x


def _nan_gradient_fwd(x, poison):
    return x, poison


def _nan_gradient_bwd(poison, g):
    return jnp.where(poison, jnp.nan, g), None


_nan_gradient.defvjp(_nan_gradient_fwd, _nan_gradient_bwd)


def _poison_one_gradient(monkeypatch) -> None:
    """The language-model forward pass, with the gradient of ``POISONED`` NaN in batches whose
    weights exceed 1 (the forward values and every other gradient unchanged)."""
    lm = FORWARDS.get("lm")

    def forward(model, batch, key):
        kernel = model.layers.layers[1].ffn.w_out.kernel
        kernel.set_value(_nan_gradient(kernel.get_value(), jnp.max(batch["weights"]) > 1.5))
        return lm.forward(model, batch, key)

    monkeypatch.setitem(FORWARDS._items, "lm", dataclasses.replace(lm, forward=forward))  # pyright: ignore[reportPrivateUsage]


def _marked_iterator(at_step: int):
    """``Data.train_iterator`` whose ``at_step``-th batch has its weights doubled (the mark)."""
    original = Data.train_iterator

    def train_iterator(self, state=None):
        it = original(self, state)
        calls = {"n": 0}
        real_next = it.__next__

        class Marked:
            def __next__(self):
                batch = real_next()
                calls["n"] += 1
                if calls["n"] == at_step:
                    batch = dict(batch, weights=batch["weights"] * 2)
                return batch

            def __getattr__(self, name):
                return getattr(it, name)

        return Marked()

    return train_iterator


def test_halt_policy_names_step_and_parameters_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(Data, "train_iterator", _marked_iterator(at_step=3))
    _poison_one_gradient(monkeypatch)
    cfg = load_experiment(TINY, ["train.nonfinite=halt", "train.steps=6", "train.checkpoint.every=2"])
    with pytest.raises(NonFiniteError) as err:
        train_in_process(cfg, str(tmp_path / "run"), devices=jax.devices()[:1])
    message = str(err.value)
    assert message.startswith(f"step 3: non-finite gradients in 1 parameters: {POISONED}; "), message
    assert "the update was not applied and no checkpoint of it was written" in message
    states = saved_states(tmp_path / "run")
    assert sorted(states) == ["checkpoints/2"], sorted(states)  # step 3 is never checkpointed
    _assert_every_checkpoint_finite(states)
    assert int(states["checkpoints/2"]["step"]) == 2
