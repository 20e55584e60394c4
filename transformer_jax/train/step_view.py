"""What a periodic action of the training loop sees and may do.

An action sees the run only through a `StepView` (the step, its state, its metrics, the tokens one
step processes; immutable) and acts only through a `Control` (write and print metrics, read the
metrics store, validate, sample, save, stop). The loop calls the actions in `Phase` order, so an
action never depends on where it sits in a list: what is measured at a step (validation) is in
the `MetricsStore` before anything is saved at that step.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol


class Phase(enum.IntEnum):
    """The order in which the loop calls the actions at each step (stable within a phase)."""

    MEASURE = 0  # profile, log, validate, sample
    DECIDE = 1  # stop on a signal or a budget
    PERSIST = 2  # checkpoints (see the step's validation and any stop decided at it)


@dataclasses.dataclass(frozen=True)
class StepView:
    """The run as an action sees it: ``step`` (before a step: the one about to run; after it and at
    the end: the one just taken), the train ``state`` at that moment, the step's ``metrics``
    (device arrays; empty before a step and at the end) and ``tokens`` (tokens one step processes)."""

    step: int
    state: Any
    metrics: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tokens: int = 0


class MetricsStore:
    """The latest value of each written metric (``train/loss``, ``val/loss``, ...) with its step."""

    def __init__(self):
        self._values: dict[str, tuple[int, Any]] = {}

    def record(self, step: int, metrics: Mapping[str, Any]) -> None:
        for name, value in metrics.items():
            self._values[name] = (step, value)

    def at(self, name: str, step: int) -> Any | None:
        """``name``'s value if it was written at ``step``, else None."""
        found = self._values.get(name)
        return found[1] if found is not None and found[0] == step else None

    def latest(self, prefix: str) -> dict[str, Any]:
        """The latest value of every metric named ``prefix + key``, as ``{key: value}``."""
        return {name[len(prefix) :]: v for name, (_, v) in self._values.items() if name.startswith(prefix)}


class Control(Protocol):
    """What an action may do to the run (`train.loop.Trainer` implements it)."""

    is_main: bool  # process 0 (prints, samples)
    metrics: MetricsStore
    action_seconds: float  # wall-clock the loop has spent in actions that pause training so far

    @property
    def stop_reason(self) -> str | None: ...

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Writes ``metrics`` to the metrics file and loggers, and records them in `metrics`."""
        ...

    def say(self, text: str) -> None:
        """Prints a line above the progress bar."""
        ...

    def progress(self, step: int, **shown: float) -> None: ...

    def stop(self, reason: str) -> None:
        """Ends the loop after this step (the first reason given is kept)."""
        ...

    def validate(self, state: Any, *, max_batches: int | None, extra: bool) -> dict[str, float]:
        """Validation metrics of ``state`` over ``max_batches`` batches (None: all), with the task's
        extra metrics when ``extra``."""
        ...

    def sample(self, state: Any, prompt: str, max_new_tokens: int, *, seed: int) -> str: ...

    def save(self, step: int, state: Any, *, best_value: float | None, force: bool = False) -> None: ...

    def has_checkpoint(self) -> bool: ...

    def wait_for_saves(self) -> None: ...


class Action:
    """Runs every ``every`` steps (0 or None: only through ``after_step``/``finish``), in ``phase``.
    ``pauses_training``: the loop counts the time of its ``run`` in ``Control.action_seconds``
    (which throughput leaves out); False for work that is the steps' own (waiting for them)."""

    every: int | None = None
    phase: ClassVar[Phase] = Phase.MEASURE
    pauses_training: ClassVar[bool] = True

    def due(self, ctl: Control, view: StepView) -> bool:
        return bool(self.every) and view.step % self.every == 0

    def before_step(self, ctl: Control, view: StepView) -> None:
        """Called before step ``view.step`` (1-based) runs."""

    def after_step(self, ctl: Control, view: StepView) -> None:
        """Called after every step, before any ``run``."""

    def run(self, ctl: Control, view: StepView) -> None:
        """The periodic work."""

    def finish(self, ctl: Control, view: StepView) -> None:
        """Called once when the loop ends at ``view.step``."""


def in_phase_order(todo: list[Action]) -> list[Action]:
    return sorted(todo, key=lambda a: a.phase)
