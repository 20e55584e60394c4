"""The loop's actions through their narrow interface: phase order, the metrics store, timing."""

import dataclasses
import time

import numpy as np
import pytest

from transformer_jax.train import actions
from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig, SkipNonfinite
from transformer_jax.train.step_view import MetricsStore, Phase, StepView, in_phase_order


class FakeControl:
    """A `Control` that records what the actions ask of it."""

    def __init__(self):
        self.is_main = True
        self.metrics = MetricsStore()
        self.action_seconds = 0.0
        self.stop_reason = None
        self.saved: list[tuple[int, float | None, bool]] = []
        self.lines: list[str] = []

    def write(self, step, metrics):
        self.metrics.record(step, metrics)

    def say(self, text):
        self.lines.append(text)

    def progress(self, step, **shown):
        pass

    def stop(self, reason):
        self.stop_reason = self.stop_reason or reason

    def validate(self, state, *, max_batches, extra):
        return {"loss": 2.5, "perplexity": float(np.exp(2.5))}

    def sample(self, state, prompt, max_new_tokens, *, seed):
        return prompt

    def save(self, step, state, *, best_value, force=False):
        self.saved.append((step, best_value, force))

    def has_checkpoint(self):
        return bool(self.saved)

    def wait_for_saves(self):
        pass


@dataclasses.dataclass(frozen=True)
class FakeState:
    step: int = 0


EVAL, SAVES = EvalConfig(every=2), CheckpointConfig(every=2)


def _drive(todo, ctl, steps):
    """The loop's calls, without a model: after_step, then run on the due actions, in the given order."""
    for step in range(1, steps + 1):
        view = StepView(step, FakeState(step), {"loss_sum": 1.0}, tokens=8)
        for action in todo:
            if action.due(ctl, view):
                action.run(ctl, view)


def test_phase_order_puts_checkpoints_after_validation_whatever_the_list_says():
    checkpoint, validate = actions.Checkpoint(SAVES, start_step=0), actions.Validate(EVAL, steps=4)
    budget = actions.Budget(None, time.time())
    ordered = in_phase_order([checkpoint, budget, validate])
    assert ordered == [validate, budget, checkpoint]
    assert [a.phase for a in ordered] == [Phase.MEASURE, Phase.DECIDE, Phase.PERSIST]


def test_checkpoint_reads_the_best_metric_of_its_step_from_the_store():
    ctl = FakeControl()
    _drive(in_phase_order([actions.Checkpoint(SAVES, start_step=0), actions.Validate(EVAL, steps=4)]), ctl, 4)
    assert ctl.saved == [(2, 2.5, False), (4, 2.5, False)]


def test_without_phase_order_the_checkpoint_would_miss_the_validation():
    """The property the ordering exists for: listed first and called first, a checkpoint sees no
    validation of its step (so this test fails if the store ignored the step)."""
    ctl = FakeControl()
    _drive([actions.Checkpoint(SAVES, start_step=0), actions.Validate(EVAL, steps=4)], ctl, 2)
    assert ctl.saved == [(2, None, False)]


def test_metrics_store_values_belong_to_their_step():
    store = MetricsStore()
    store.record(3, {"val/loss": 1.5, "train/loss": 2.0})
    store.record(5, {"train/loss": 1.0})
    assert store.at("val/loss", 3) == 1.5 and store.at("val/loss", 5) is None
    assert store.latest("train/") == {"loss": 1.0}
    assert store.latest("val/") == {"loss": 1.5}


def test_log_leaves_out_the_time_actions_paused_training(monkeypatch):
    clock = {"t": 100.0}
    monkeypatch.setattr(actions.time, "time", lambda: clock["t"])
    monkeypatch.setattr(actions.jax, "block_until_ready", lambda x: x)
    monkeypatch.setattr(actions.jax, "device_get", lambda x: x)
    sums = {"loss_sum": 8.0, "objective_sum": 8.0, "correct_sum": 0.0, "weight_sum": 8.0, "finite": True}
    metrics = {**sums, "nonfinite_grads": None, "skips": 0}
    log = actions.Log(LogConfig(every=2), SkipNonfinite(), steps=10, flops_per_token=1.0, peak_flops=None, start_step=0)
    ctl = FakeControl()
    log.before_step(ctl, StepView(1, FakeState()))
    clock["t"] += 5.0  # compiling
    log.after_step(ctl, StepView(1, FakeState(1), metrics, tokens=8))
    assert log.compile_s == pytest.approx(5.0)
    clock["t"] += 1.0  # step 2 runs, then a validation pauses training for 3 s
    ctl.action_seconds += 3.0
    clock["t"] += 3.0
    log.after_step(ctl, StepView(2, FakeState(2), metrics, tokens=8))
    log.run(ctl, StepView(2, FakeState(2)))
    assert ctl.metrics.at("train/tokens_per_s", 2) == pytest.approx(8 / 1.0)
    assert ctl.metrics.at("train/loss", 2) == pytest.approx(1.0)


def test_a_run_without_a_best_checkpoint_saves_no_best_value():
    ctl = FakeControl()
    saves = CheckpointConfig(every=2, best=None)
    _drive(in_phase_order([actions.Checkpoint(saves, start_step=0), actions.Validate(EVAL, steps=4)]), ctl, 2)
    assert ctl.saved == [(2, None, False)]
