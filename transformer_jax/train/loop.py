"""The training loop: jitted steps, with logging, validation, checkpoints, samples and stopping as
periodic actions (``train.actions``), in a workdir held by one trainer at a time (``train.lock``).

The actions see each step through an immutable ``StepView`` and act through the trainer's narrow
``Control`` interface (``train.step_view``); the loop calls them in phase order and times them."""

from __future__ import annotations

import json
import time
from typing import Any

import jax
import numpy as np

from transformer_jax.core import compiler, configlib, migration, targets, unread
from transformer_jax.core.paths import user_path
from transformer_jax.decode import TopK
from transformer_jax.eval.evaluate import evaluate, make_eval_step
from transformer_jax.eval.sampling import sample_from
from transformer_jax.eval.task_metrics import EXTRA_METRICS
from transformer_jax.models import count_params
from transformer_jax.models.forward import FORWARDS
from transformer_jax.models.lora import split_adapters
from transformer_jax.parallel import sharding_context
from transformer_jax.train import actions, aot, flops
from transformer_jax.train import ngram as _ngram  # noqa: F401 - registers the n-gram's entry point
from transformer_jax.train.checkpoint import SUPERSEDED_SUFFIX, CheckpointError
from transformer_jax.train.config import Config
from transformer_jax.train.entry import entry_point
from transformer_jax.train.experiment import absolute_paths
from transformer_jax.train.lock import WorkdirLock
from transformer_jax.train.loggers import check_installed
from transformer_jax.train.metrics import MetricsWriter, ProgressBar, logger_settings
from transformer_jax.train.optim import warn_schedule
from transformer_jax.train.run import checkpoint_view, setup
from transformer_jax.train.step import jit_train_step
from transformer_jax.train.step_view import MetricsStore, StepView, in_phase_order

SAMPLING = TopK(k=40, temperature=0.8)  # how a training run's text samples are drawn (periodic and final)


def train(cfg: Config, workdir: str, *, devices=None, restore_step: int | None = None) -> dict[str, Any]:
    """Trains ``cfg`` in ``workdir`` (resuming from its latest checkpoint that restores, or from
    ``restore_step``) and returns the final summary (the command line prints it as its last line).
    A config field that the chosen variants do not read, set to a non-default value, is an error."""
    unread.check_reads(cfg)
    check_installed(cfg.train.log.logger_names())  # a missing logger package stops the run before it starts
    cfg = absolute_paths(cfg)  # the stored config.json works from any directory
    with WorkdirLock(workdir, enabled=jax.process_index() == 0):
        entry = entry_point(cfg.model.kind)
        if entry is not None:
            if restore_step is not None:
                configlib.fail("--restore-step", restore_step, f"model.kind={cfg.model.kind!r} keeps no checkpoints")
            return entry.train(cfg, workdir)
        return Trainer(cfg, workdir, devices=devices, restore_step=restore_step).run()


class Trainer:
    """One invocation of training: builds the run, steps it, and lets the actions do the rest
    (it is their ``train.step_view.Control``)."""

    def __init__(self, cfg: Config, workdir: str, *, devices=None, restore_step: int | None = None):
        self.t_start = time.time()
        self.workdir = workdir
        self.run_, saved_data = setup(cfg, workdir, devices=devices, restore_step=restore_step, fallback=True)
        if restore_step is not None:
            _supersede_later(self.run_.checkpoints, restore_step)
        self.data_state = None if saved_data is None else _own_data_state(saved_data)
        run = self.run_
        self.cfg, self.tc = run.cfg, run.cfg.train
        self.is_main = jax.process_index() == 0
        if self.is_main:
            warn_schedule(self.tc.optim, self.tc.steps)
        self.start_step = int(jax.device_get(run.state.step))
        self.task = FORWARDS.get(run.data.task)
        self.sources = run.data.sources
        self.train_step = jit_train_step(
            run.graphdef, run.tx, self.task, self.tc, run.schedule, run.state, n_sources=len(self.sources)
        )
        if targets.platform() != "cpu":  # an accelerator: the step's memory against the device's, before step 1
            aot.check_fits(self.train_step, run.state, self.cfg, run.mesh)
        self.eval_step = compiler.jit(make_eval_step(run.graphdef, self.task, len(self.sources)))
        m = self.cfg.model
        self.n_params = count_params(m)
        trainable = split_adapters(run.state.params)[0] if self.tc.lora is not None else run.state.params
        self.n_trainable = int(sum(np.prod(x.shape) for x in jax.tree.leaves(trainable)))
        self.flops_per_token = flops.model_flops_per_token(m, self.cfg.data.seq_len)
        self.peak_flops = self.tc.log.peak_flops or _peak_flops()  # measured outside any mesh context
        self.meta = {"config": configlib.to_dict(self.cfg), "tokenizer": run.data.tokenizer.to_json()}
        if self.start_step:  # in every process: Orbax restores the metadata with a barrier of all
            _warn_changed_settings(run.checkpoints, self.start_step, self.meta["config"], warn=self.is_main)
        if run.base is not None:
            self.meta["base"] = run.base
        self.state = run.state
        self._stop_reason: str | None = None
        self.writer: MetricsWriter | None = None
        self.bar: ProgressBar | None = None
        self.it = None
        self.metrics = MetricsStore()
        self.action_seconds = 0.0

    # The actions' Control (train.step_view) ---------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def stop(self, reason: str) -> None:
        self._stop_reason = self._stop_reason or reason

    def write(self, step: int, metrics) -> None:
        assert self.writer is not None
        self.writer.write(step, metrics)
        self.metrics.record(step, metrics)

    def say(self, text: str) -> None:
        assert self.bar is not None
        self.bar.write(text)

    def progress(self, step: int, **shown: float) -> None:
        assert self.bar is not None
        self.bar.update(step, **shown)

    def has_checkpoint(self) -> bool:
        return self.run_.checkpoints.latest_step() is not None

    def wait_for_saves(self) -> None:
        self.run_.checkpoints.wait()

    def validate(self, state, *, max_batches: int | None, extra: bool) -> dict[str, float]:
        """Validation metrics of ``state`` over ``max_batches`` batches (None: all): loss,
        perplexity, accuracy, and the task's extras when ``extra``."""
        run, best = self.run_, self.tc.checkpoint.best
        batches = run.data.eval_batches("val", max_batches)
        result = evaluate(self.eval_step, state, batches, run.put_batch, self.sources)
        if run.data.task in EXTRA_METRICS and extra:
            result.update(EXTRA_METRICS.get(run.data.task)(run, state, "val", max_batches))
        if best is not None and best.metric not in result:
            configlib.fail(
                "train.checkpoint.best.metric",
                best.metric,
                "is not among the validation metrics",
                f"choose one of {sorted(result)}",
            )
        return result

    def save(self, step: int, state, *, best_value: float | None, force: bool = False) -> None:
        state = checkpoint_view(self.cfg, state)
        self.run_.checkpoints.save(
            step, state, _all_data_states(self.it), self.meta, best_value=best_value, force=force
        )

    def sample(self, state, prompt: str, max_new_tokens: int, *, seed: int) -> str:
        return sample_from(self.run_, state, prompt, max_new_tokens=max_new_tokens, sampling=SAMPLING, seed=seed)

    # The loop -------------------------------------------------------------------------------

    def _announce(self) -> None:
        if not self.is_main:
            return
        root = user_path(self.workdir, "--workdir")  # a gs:// workdir where the environment provides it
        (root / "config.json").write_text(configlib.to_json(self.cfg))
        run = self.run_
        run.data.tokenizer.save(root / "tokenizer")
        if self.start_step:
            start = f"resuming at step {self.start_step}"
        elif self.tc.init_from is not None:
            start = f"starting from the pretrained weights of {self.tc.init_from}"
        else:
            start = "starting from scratch"
        print(
            f"model: {self.cfg.model.kind}, {self.n_params:,} parameters"
            + (f" ({self.n_trainable:,} trainable: LoRA adapters)" if self.tc.lora is not None else "")
            + (f", from {self.tc.init_from}" if self.tc.init_from is not None else "")
            + f"; data: {self.cfg.data.dataset.kind} "
            f"({run.data.task}, vocab {run.data.vocab_size}); devices: {jax.device_count()} "
            f"({jax.default_backend()}); mesh {dict(run.mesh.shape)}; {start}",
            flush=True,
        )

    def _actions(self, stop_signal: actions.StopSignal) -> list[actions.Action]:
        tc = self.tc
        self.log = actions.Log(
            tc.log,
            tc.nonfinite,
            steps=tc.steps,
            flops_per_token=self.flops_per_token,
            peak_flops=self.peak_flops,
            start_step=self.start_step,
            sources=self.sources,
        )
        window = None if tc.profile is None else tc.profile_steps()
        return in_phase_order(
            [
                actions.Profile(window, self.workdir, start_step=self.start_step),
                self.log,
                actions.Validate(tc.eval, steps=tc.steps),
                actions.Sample(tc.sample),
                actions.Budget(tc.max_minutes, self.t_start),
                stop_signal,
                actions.Checkpoint(tc.checkpoint, start_step=self.start_step),
            ]
        )

    def _run_action(self, action: actions.Action, call, view: StepView) -> None:
        """``call(self, view)``, its wall-clock added to ``action_seconds`` if it pauses training."""
        t0 = time.time()
        call(self, view)
        if action.pauses_training:
            self.action_seconds += time.time() - t0

    def run(self) -> dict[str, Any]:
        tc, run = self.tc, self.run_
        self._announce()
        key = jax.random.key(tc.seed)
        self.it = run.data.train_iterator(self.data_state)
        self.writer = MetricsWriter(
            self.workdir,
            enabled=self.is_main,
            resume_step=self.start_step or None,
            **logger_settings(self.cfg),
        )
        self.bar = ProgressBar(tc.steps, initial=self.start_step, enabled=self.is_main)
        step = self.start_step
        tokens_key = self.task.tokens
        try:
            with actions.StopSignal() as stop_signal, sharding_context(run.mesh):
                todo = self._actions(stop_signal)
                while step < tc.steps and self.stop_reason is None:
                    before = StepView(step + 1, self.state)
                    for action in todo:
                        action.before_step(self, before)
                    with jax.profiler.StepTraceAnnotation("train_step", step_num=step + 1):
                        batch = run.put_batch(next(self.it))
                        self.state, metrics = self.train_step(self.state, batch, key)
                    step += 1
                    view = StepView(step, self.state, metrics, tokens=batch[tokens_key].size)
                    for action in todo:
                        action.after_step(self, view)
                    for action in todo:
                        if action.due(self, view):
                            self._run_action(action, action.run, view)
                self.stop("steps")
                end = StepView(step, self.state)
                for action in todo:
                    self._run_action(action, action.finish, end)
        finally:
            self._close()
        run.state = self.state
        return self._summary(step)

    def _summary(self, step: int) -> dict[str, Any]:
        val = self.metrics.latest("val/")
        return {
            "step": step,
            "train_loss": self.log.train_loss,
            "val_loss": val.get("loss"),
            "val_perplexity": val.get("perplexity"),
            **{f"val_{k}": v for k, v in val.items() if k not in ("loss", "perplexity", "tokens")},
            "tokens_per_s": self.log.median_rate() if self.is_main else None,
            "compile_s": self.log.compile_s,
            "wall_s": time.time() - self.t_start,
            "params": self.n_params,
            "trainable_params": self.n_trainable,
            "stopped": self.stop_reason,
            "skipped_steps": int(jax.device_get(self.state.total_skips)),
        }

    def _close(self) -> None:
        """Always runs: finishes in-flight checkpoint writes (the last good checkpoint must land
        even when training stops on an error), closes logs and the data iterator."""
        try:
            self.run_.checkpoints.close()
        except CheckpointError as e:
            actions.log.error("%s", e)
        for thing in (self.bar, self.writer, self.it):
            if thing is not None:
                thing.close()


# settings (and groups of them) that leave the trained weights alone: changing them on resume needs no warning
_BOOKKEEPING = ("name", "train.max_minutes", "train.log", "train.sample", "train.profile")


def _bookkeeping(key: str) -> bool:
    return any(key == b or key.startswith(b + ".") for b in _BOOKKEEPING)


def _warn_changed_settings(checkpoints, step: int, config: dict, *, warn: bool = True) -> None:
    """Warns (if ``warn``), naming each field, when a run resumes checkpoint ``step`` under settings
    other than those it was trained with so far (the steps before it keep the saved ones)."""
    saved = checkpoints.restore_meta(step).get("config")
    if not warn or not isinstance(saved, dict):
        return
    changed = [c for c in configlib.changed_fields(migration.upgrade(saved), config) if not _bookkeeping(c[0])]
    if changed:
        actions.log.warning(
            "resuming step %d of %s with %d setting(s) changed since it was saved (steps up to %d used the "
            "saved ones): %s",
            step,
            checkpoints.workdir,
            len(changed),
            step,
            "; ".join(f"{k} {a!r} -> {b!r}" for k, a, b in changed),
        )


def _supersede_later(ckpts, step: int) -> None:
    """Training again from ``step``: the later checkpoints belong to the old continuation, so they
    are set aside as ``<step>.superseded`` (never restored, never overwritten) with a warning."""
    for later in sorted(s for s in ckpts.steps() if s > step):
        moved = ckpts.set_aside(later, suffix=SUPERSEDED_SUFFIX)
        actions.log.warning("--restore-step %d: set aside the later checkpoint of step %d as %s", step, later, moved)


def _all_data_states(it) -> dict:
    """Every process's data-iterator state (JSON), gathered so that process 0 can save them all."""
    own = json.dumps(it.get_state())
    if jax.process_count() == 1:
        return {"processes": [json.loads(own)]}
    from jax.experimental import multihost_utils

    raw = np.frombuffer(own.encode(), np.uint8)
    longest = int(np.max(multihost_utils.process_allgather(np.array([raw.size]))))
    padded = np.zeros(longest, np.uint8)
    padded[: raw.size] = raw
    gathered = np.asarray(multihost_utils.process_allgather(padded)).reshape(jax.process_count(), longest)
    return {"processes": [json.loads(bytes(row).rstrip(b"\0").decode()) for row in gathered]}


def _own_data_state(saved: dict) -> dict:
    states = saved["processes"]
    if len(states) != jax.process_count():
        raise CheckpointError(
            f"the checkpoint holds the data position of {len(states)} processes but "
            f"{jax.process_count()} are running: each process reads its own slice of the data, so "
            f"the positions do not carry over; resume with {len(states)} processes"
        )
    return states[jax.process_index()]


def _peak_flops() -> float | None:
    device = jax.devices()[0]
    known = flops.known_peak_flops(device)
    if known is not None:
        return known * jax.device_count()
    return flops.gemm_peak_flops() * jax.device_count() if device.platform == "cpu" else None


def summary_line(summary: dict) -> str:
    return json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in summary.items()})
