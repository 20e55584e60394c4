"""``train.timing``: the real train step prepared once, then timed in alternating rounds."""

import os

import pytest

from transformer_jax import ablation
from transformer_jax.train import timing


def test_alternating_rounds_time_every_config_once_per_round_in_turn():
    calls = []
    timers = {name: (lambda name=name: calls.append(name) or float(len(calls))) for name in ("a", "b", "c")}
    out = timing.alternating_rounds(timers, 3)
    assert calls == ["a", "b", "c"] * 3
    assert out == {"a": [1.0, 4.0, 7.0], "b": [2.0, 5.0, 8.0], "c": [3.0, 6.0, 9.0]}
    with pytest.raises(ValueError, match="rounds=0"):
        timing.alternating_rounds(timers, 0)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    return ablation.shakespeare_config("timing_test", steps=10)


def test_prepared_step_trains_the_config_and_times_real_steps(tiny):
    p = timing.prepare_step(tiny, warmup=2)
    try:
        assert int(p.state.step) == 2 and "grad_norm" in p.metrics
        seconds = p.seconds_per_step(3)
        assert seconds > 0 and int(p.state.step) == 5  # the timed steps are training steps
    finally:
        p.close()
    assert not os.path.exists(p.workdir)
    with pytest.raises(ValueError, match="warmup=0"):
        timing.prepare_step(tiny, warmup=0)


def test_step_seconds_by_round_times_each_prepared_step_and_closes_them(monkeypatch):
    prepared = {}

    class Fake:
        def __init__(self, cfg, warmup):
            self.cfg, self.calls, self.closed = cfg, [], False
            prepared[cfg] = self

        def seconds_per_step(self, steps):
            self.calls.append(steps)
            return 0.1 * len(self.calls) if self.cfg == "a" else 1.0

        def close(self):
            self.closed = True

    monkeypatch.setattr(timing, "prepare_step", lambda cfg, *, warmup: Fake(cfg, warmup))
    out = timing.step_seconds_by_round({"first": "a", "second": "b"}, rounds=3, steps=7, warmup=1)
    assert out == {"first": pytest.approx([0.1, 0.2, 0.3]), "second": [1.0, 1.0, 1.0]}
    assert all(p.calls == [7, 7, 7] and p.closed for p in prepared.values())
