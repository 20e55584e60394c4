"""The training loop's periodic actions: log, validate, stop (signal, budget), checkpoint, sample, profile.

Each action owns its schedule and its bookkeeping, and sees the run only through a
``train.step_view.StepView`` and a ``Control`` (see there). Before every step the loop calls
``before_step`` on each action; after it, ``after_step`` on each, then ``run`` on those that are
``due``; when the loop ends (steps done or a stop requested) it calls ``finish`` on each; always in
``Phase`` order, and it times the ``run`` calls itself.
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import numpy as np

from transformer_jax.core.paths import is_url, upload_tree, user_path
from transformer_jax.eval.evaluate import per_source_losses
from transformer_jax.train.action_config import (
    CheckpointConfig,
    EvalConfig,
    HaltOnNonfinite,
    LogConfig,
    NonfiniteConfig,
    SampleConfig,
    SkipNonfinite,
)
from transformer_jax.train.checkpoint import all_finite
from transformer_jax.train.step_view import Action, Control, Phase, StepView

log = logging.getLogger("transformer_jax.train")


class NonFiniteError(RuntimeError):
    """Training produced non-finite loss or gradients under ``train.nonfinite=halt`` (or too many
    consecutive skips under ``skip``)."""


SOURCE_SUMS = ("source/loss_sum", "source/weight_sum")
_SUMS = ("loss_sum", "objective_sum", "correct_sum", "weight_sum", "finite", "nonfinite_grads", *SOURCE_SUMS)


def reduce_metrics(metrics: list[dict], sources: Sequence[str] = ()) -> dict[str, Any]:
    """Token-weighted means of the sums, last values of the rest, over a logging interval; with
    ``sources`` (a mixture's names), ``loss/NAME`` over the interval's targets of each source."""
    weight = sum(float(m["weight_sum"]) for m in metrics)
    out = {
        "loss": sum(float(m["loss_sum"]) for m in metrics) / max(weight, 1.0),
        "objective": sum(float(m["objective_sum"]) for m in metrics) / max(weight, 1.0),
        "accuracy": sum(float(m["correct_sum"]) for m in metrics) / max(weight, 1.0),
        "finite": all(bool(m["finite"]) for m in metrics),
    }
    out["perplexity"] = math.exp(min(out["loss"], 700.0))
    for k, v in metrics[-1].items():
        if k not in _SUMS:
            out[k] = np.asarray(v).tolist()
    if sources:
        nll, weight = (sum(np.asarray(m[k], np.float64) for m in metrics) for k in SOURCE_SUMS)
        out.update(per_source_losses(sources, nll, weight))
    out["nonfinite_grads"] = next((m["nonfinite_grads"] for m in metrics if not bool(m["finite"])), None)
    return out


def check_finite(logged: dict, step: int, policy: NonfiniteConfig) -> None:
    """Warns about a skipped non-finite step, or raises `NonFiniteError` (``halt``, too many skips)."""
    bad_tree = logged.pop("nonfinite_grads")
    if logged["finite"]:
        return
    names = [jax.tree_util.keystr(p) for p, bad in jax.tree_util.tree_flatten_with_path(bad_tree)[0] if bad]
    where = (
        f"non-finite gradients in {len(names)} parameters: {', '.join(names[:10])}" if names else "a non-finite loss"
    )
    if isinstance(policy, HaltOnNonfinite):
        raise NonFiniteError(
            f"step {step}: {where}; the update was not applied and no checkpoint of it was "
            "written. Lower train.optim.lr, check the data, or set train.nonfinite=skip"
        )
    log.warning("step %d: %s; update skipped (%d in a row)", step, where, logged["skips"])
    if isinstance(policy, SkipNonfinite) and logged["skips"] >= policy.max_consecutive:
        raise NonFiniteError(
            f"step {step}: {logged['skips']} consecutive non-finite steps ({where}); halting. "
            "Lower train.optim.lr or check the data"
        )


class Log(Action):
    """Train metrics every ``train.log.every`` steps (every step under ``train.nonfinite=halt``,
    which must see each step's finiteness) and at the last step (``steps``); tokens/s and MFU over
    the interval, excluding the compiling first step and the time the loop spent in actions that
    pause training."""

    every: int  # train.log.every, never None

    phase = Phase.MEASURE
    pauses_training = False  # its run waits for the interval's steps: their time, not a pause

    def __init__(
        self,
        settings: LogConfig,
        nonfinite: NonfiniteConfig,
        *,
        steps: int,
        flops_per_token: float,
        peak_flops: float | None,
        start_step: int,
        sources: Sequence[str] = (),
    ):
        self.every, self.nonfinite, self.steps, self.sources = settings.every, nonfinite, steps, tuple(sources)
        self.flops_per_token, self.peak = flops_per_token, peak_flops
        self.pending: list[Any] = []
        self.since_step, self.since_time, self.paused_at_start = start_step, time.time(), 0.0
        self.tokens_per_step = 0
        self.step_started = time.time()
        self.train_loss = float("nan")
        self.compile_s: float | None = None
        self.rates: list[float] = []  # tokens/s of each logged interval of this process's run

    def due(self, ctl: Control, view: StepView) -> bool:
        halt = isinstance(self.nonfinite, HaltOnNonfinite)
        return halt or view.step % self.every == 0 or view.step == self.steps

    def before_step(self, ctl: Control, view: StepView) -> None:
        self.step_started = time.time()

    def after_step(self, ctl: Control, view: StepView) -> None:
        self.pending.append(view.metrics)
        self.tokens_per_step = view.tokens
        if self.compile_s is None:
            jax.block_until_ready(view.state.step)
            self.compile_s = time.time() - self.step_started
            self.since_step, self.since_time, self.paused_at_start = view.step, time.time(), ctl.action_seconds

    def run(self, ctl: Control, view: StepView) -> None:
        step = view.step
        logged = reduce_metrics(jax.device_get(self.pending), self.sources)  # waits for the interval's steps
        now = time.time()
        elapsed = max(now - self.since_time - (ctl.action_seconds - self.paused_at_start), 1e-9)
        tok_s = self.tokens_per_step * (step - self.since_step) / elapsed if step > self.since_step else None
        check_finite(logged, step, self.nonfinite)
        self.train_loss = logged["loss"]
        mfu = tok_s * self.flops_per_token / self.peak if self.peak and tok_s is not None else None
        logged.update(tokens_per_s=tok_s, mfu=mfu)
        if tok_s is not None:
            self.rates.append(tok_s)
        ctl.write(step, {f"train/{k}": v for k, v in logged.items() if v is not None})
        ctl.progress(step, loss=self.train_loss, **({} if tok_s is None else {"tok_s": tok_s}))
        self.pending, self.since_step, self.since_time, self.paused_at_start = [], step, now, ctl.action_seconds

    def finish(self, ctl: Control, view: StepView) -> None:
        if self.pending:
            self.run(ctl, view)

    def median_rate(self) -> float | None:
        """The median tokens/s of this run's own intervals (the first left out when there are 3+)."""
        rates = self.rates[1:] if len(self.rates) > 2 else self.rates
        return float(np.median(rates)) if rates else None


class Validate(Action):
    """Validation every ``train.eval.every`` steps, at the last step (``steps``), and when the run
    stops early; the results go to the metrics store as ``val/<name>``."""

    every: int  # train.eval.every, never None
    phase = Phase.MEASURE

    def __init__(self, settings: EvalConfig, *, steps: int):
        self.settings, self.every, self.steps = settings, settings.every, steps
        self.at: int | None = None

    def due(self, ctl: Control, view: StepView) -> bool:
        return view.step % self.every == 0 or view.step == self.steps

    def run(self, ctl: Control, view: StepView) -> None:
        result = ctl.validate(view.state, max_batches=self.settings.batches, extra=self.settings.extra)
        ctl.write(view.step, {f"val/{k}": v for k, v in result.items()})
        shown = ", ".join(f"val {k} {v:.4f}" for k, v in result.items() if k not in ("tokens", "batches"))
        ctl.say(f"step {view.step}: {shown} ({result.get('batches', '?')} batches)")
        self.at = view.step

    def finish(self, ctl: Control, view: StepView) -> None:
        if ctl.stop_reason != "steps" and self.at != view.step:
            self.run(ctl, view)


HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
MAX_MINUTES = "max_minutes"
UNFINISHED_STOPS = (*(sig.name for sig in HANDLED_SIGNALS), MAX_MINUTES)
"""Stop reasons (``summary["stopped"]``) of a run that ended before ``train.steps`` without being asked to."""


class StopSignal(Action):
    """SIGTERM/SIGINT: the loop finishes the current step, validates, saves and exits cleanly; a
    second signal stops at once."""

    phase = Phase.DECIDE

    every = 1

    def __init__(self):
        self.signal: int | None = None
        self._old: dict = {}

    def __enter__(self) -> StopSignal:
        for sig in HANDLED_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                continue
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum
        print(
            f"\nreceived {signal.Signals(signum).name}: finishing this step, saving a checkpoint, then exiting",
            flush=True,
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def run(self, ctl: Control, view: StepView) -> None:
        if self.signal is not None:
            ctl.stop(signal.Signals(self.signal).name)


class Budget(Action):
    """``train.max_minutes`` of wall-clock since the trainer started: stop cleanly when spent."""

    phase = Phase.DECIDE

    def __init__(self, minutes: float | None, t_start: float):
        self.minutes, self.t_start = minutes, t_start
        self.every = 1 if self.minutes is not None else None

    def run(self, ctl: Control, view: StepView) -> None:
        if self.minutes is not None and time.time() - self.t_start > 60 * self.minutes:
            ctl.stop(MAX_MINUTES)


class Checkpoint(Action):
    """A checkpoint every ``train.checkpoint.every`` steps (with ``val/<train.checkpoint.best.metric>``
    from the metrics store when validation ran at that step, for ``best/``), and a final one unless
    that step is saved already. In the last phase: it sees the step's validation and stop decisions."""

    every: int  # train.checkpoint.every, never None
    phase = Phase.PERSIST

    def __init__(self, settings: CheckpointConfig, *, start_step: int):
        self.every, self.best = settings.every, settings.best
        self.last_saved = start_step

    def due(self, ctl: Control, view: StepView) -> bool:
        return ctl.stop_reason is None and view.step % self.every == 0

    def run(self, ctl: Control, view: StepView, *, force: bool = False) -> None:
        best_value = None if self.best is None else ctl.metrics.at(f"val/{self.best.metric}", view.step)
        ctl.save(view.step, view.state, best_value=best_value, force=force)
        self.last_saved = view.step

    def finish(self, ctl: Control, view: StepView) -> None:
        if view.step != self.last_saved or not ctl.has_checkpoint():
            self.run(ctl, view, force=True)
        ctl.wait_for_saves()


class Sample(Action):
    """Print a short sample of the current model every ``train.sample.every`` steps (0: never)."""

    def __init__(self, settings: SampleConfig):
        self.settings, self.every = settings, settings.every

    def run(self, ctl: Control, view: StepView) -> None:
        if not ctl.is_main or not all_finite(view.state.params):
            return
        text = ctl.sample(view.state, self.settings.prompt, self.settings.tokens, seed=view.step)
        ctl.say(f"step {view.step} sample: {text!r}")


class Profile(Action):
    """``train.profile="START:STOP"`` (``window``): a ``jax.profiler`` trace of steps START..STOP (each step
    annotated ``train_step``) in ``WORKDIR/profile/``, readable by XProf / TensorBoard's profile
    plugin. Tracing waits for the steps before START to finish and for STOP to finish."""

    pauses_training: ClassVar[bool] = False

    def __init__(self, window: tuple[int, int] | None, workdir: str, *, start_step: int):
        self.window = window
        self.profile = None if window is None else f"{window[0]}:{window[1]}"
        self.target = user_path(workdir, "--workdir") / "profile"  # the profiler writes local files:
        self.directory = tempfile.mkdtemp(prefix="tj_profile_") if is_url(self.target) else str(self.target)
        self.tracing = False
        if self.window is not None and start_step >= self.window[0]:
            log.warning(
                "train.profile=%s is not traced: the run resumes at step %d, after its start", self.profile, start_step
            )
            self.window = None

    def before_step(self, ctl: Control, view: StepView) -> None:
        if self.window is not None and view.step == self.window[0]:
            jax.block_until_ready(view.state)
            jax.profiler.start_trace(self.directory)
            self.tracing = True

    def after_step(self, ctl: Control, view: StepView) -> None:
        if self.tracing and self.window is not None and view.step == self.window[1]:
            self._stop(view)

    def _stop(self, view: StepView) -> None:
        jax.block_until_ready(view.state)
        jax.profiler.stop_trace()
        self.tracing = False
        if is_url(self.target):  # traced locally, then copied to the gs:// workdir
            upload_tree(self.directory, self.target)
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = str(self.target)
        log.info("profile of train.profile=%s written to %s", self.profile, self.directory)

    def finish(self, ctl: Control, view: StepView) -> None:
        if self.tracing:
            self._stop(view)
