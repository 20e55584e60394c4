"""The training loop: data -> jitted steps -> metrics, evaluation, checkpoints, resume."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import time
import warnings
from typing import Any

import jax
import numpy as np

from transformer_jax import compiler, configlib
from transformer_jax.data import build_data, tokenizer_from_json
from transformer_jax.models import count_params
from transformer_jax.parallel import batch_sharding, make_mesh, sharding_context
from transformer_jax.train import flops
from transformer_jax.train.checkpoint import CheckpointError, Checkpoints
from transformer_jax.train.config import Config, resolve
from transformer_jax.train.evaluate import evaluate
from transformer_jax.train.metrics import MetricsWriter, ProgressBar
from transformer_jax.train.optim import make_optimizer, make_schedule
from transformer_jax.train.state import abstract_state, init_state, model_graph, state_sharding_tree
from transformer_jax.train.step import make_eval_step, make_train_step
from transformer_jax.train.tasks import TASKS

log = logging.getLogger("transformer_jax.train")


class NonFiniteError(RuntimeError):
    """Training produced non-finite loss or gradients under ``train.nonfinite='halt'`` (or too
    many consecutive skips)."""


class _StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes the current step, saves and exits cleanly."""

    def __init__(self):
        self.signal: int | None = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.signal is not None:  # a second signal: stop now
            raise KeyboardInterrupt
        self.signal = signum
        print(f"\nreceived {signal.Signals(signum).name}: finishing this step, saving a checkpoint, then exiting",
              flush=True)

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


@dataclasses.dataclass
class Run:
    """Everything a trained run needs for evaluation and sampling."""

    cfg: Config
    data: Any
    graphdef: Any
    mesh: Any
    state: Any
    checkpoints: Checkpoints
    put_batch: Any
    tx: Any


def setup(cfg: Config, workdir: str, *, restore: bool = True, best: bool = False,
          devices=None) -> tuple[Run, dict | None]:
    """Builds data, model, optimizer and state; restores the latest (or best) checkpoint of
    ``workdir`` when there is one. Returns the run and the restored data-iterator states
    (``{"processes": [state of each training process]}``; any process count may evaluate them).
    ``devices`` (default: all) are arranged into the mesh of ``cfg.mesh``."""
    cfg = resolve(cfg)
    os.makedirs(workdir, exist_ok=True)
    ckpts = Checkpoints(workdir, keep=cfg.train.keep_checkpoints, keep_best=cfg.train.keep_best,
                        best_mode=cfg.train.best_mode)
    step = (ckpts.best.latest_step() if best and ckpts.best is not None else ckpts.latest_step()) if restore else None
    tokenizer = None
    if step is not None:
        meta = ckpts.restore_meta(step, best=best)
        tokenizer = tokenizer_from_json(meta["tokenizer"])
    n_proc, proc = jax.process_count(), jax.process_index()
    if cfg.train.batch_size % n_proc:
        configlib.fail("train.batch_size", cfg.train.batch_size, f"is not divisible by the {n_proc} processes")
    data = build_data(cfg.data, batch_size=cfg.train.batch_size // n_proc, tokenizer=tokenizer,
                      process_index=proc, process_count=n_proc)
    if cfg.model.vocab_size != data.vocab_size:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=data.vocab_size))
    mesh = make_mesh(cfg.mesh, devices)
    n_batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if cfg.train.batch_size % n_batch_shards:
        configlib.fail("train.batch_size", cfg.train.batch_size,
                       f"is not divisible by the data x fsdp mesh axes ({n_batch_shards} devices)",
                       "change the batch size or the mesh (e.g. --set mesh.data=1 mesh.fsdp=1 ...)")
    tx = make_optimizer(cfg.train.optim, cfg.train.steps)
    graphdef, _, _ = model_graph(cfg.model)
    data_state = None
    with sharding_context(mesh):
        if step is not None:
            state, data_state, _ = ckpts.restore(abstract_state(cfg.model, tx, mesh=mesh), step, best=best)
        else:
            state = init_state(cfg.model, tx, seed=cfg.train.seed, mesh=mesh)
    sharding = batch_sharding(mesh)

    def put_batch(batch: dict) -> dict:
        return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in batch.items()}

    return Run(cfg, data, graphdef, mesh, state, ckpts, put_batch, tx), data_state


def train(cfg: Config, workdir: str, *, devices=None) -> dict[str, Any]:
    """Trains ``cfg`` in ``workdir`` (resuming from its latest checkpoint) and returns the
    final summary (also printed as the last line of output by the command line)."""
    if cfg.model.kind == "ngram":
        from transformer_jax.train.ngram import train_ngram

        return train_ngram(cfg, workdir)
    return Trainer(cfg, workdir, devices=devices).run()


class Trainer:
    """One invocation of training: the loop, logging, validation, checkpoints, stopping."""

    def __init__(self, cfg: Config, workdir: str, *, devices=None):
        self.t_start = time.time()
        self.workdir = workdir
        self.run_, saved_data = setup(cfg, workdir, devices=devices)
        self.data_state = None if saved_data is None else _own_data_state(saved_data)
        run = self.run_
        self.cfg, self.tc, self.ckpts = run.cfg, run.cfg.train, run.checkpoints
        self.is_main = jax.process_index() == 0
        self.start_step = int(jax.device_get(run.state.step))
        self.task = TASKS.get(run.data.task)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # make_optimizer in setup() already warned
            schedule = make_schedule(self.tc.optim, self.tc.steps)
        self.train_step = compiler.jit(make_train_step(run.graphdef, run.tx, self.task, self.tc, schedule),
                                       donate_argnums=(0,), out_shardings=(state_sharding_tree(run.state), None))
        self.eval_step = compiler.jit(make_eval_step(run.graphdef, self.task))
        m = self.cfg.model
        self.n_params = count_params(m)
        n_positions = m.max_len * m.d_model if m.position == "learned" else 0
        self.flops_per_token = flops.decoder_flops_per_token(self.n_params - n_positions, m.n_layers, m.d_model,
                                                             self.cfg.data.seq_len)
        self.peak = self.tc.peak_flops or _peak_flops()
        self.meta = {"config": configlib.to_dict(self.cfg), "tokenizer": run.data.tokenizer.to_json()}
        self.writer = self.bar = self.it = None
        self.val: dict[str, float] | None = None
        self.train_loss = float("nan")
        self.compile_s: float | None = None

    def _announce(self) -> None:
        if not self.is_main:
            return
        with open(os.path.join(self.workdir, "config.json"), "w") as f:
            f.write(configlib.to_json(self.cfg))
        self.run_.data.tokenizer.save(os.path.join(self.workdir, "tokenizer"))
        run = self.run_
        print(f"model: {self.cfg.model.kind}, {self.n_params:,} parameters; data: {self.cfg.data.dataset} "
              f"({run.data.task}, vocab {run.data.vocab_size}); devices: {jax.device_count()} "
              f"({jax.default_backend()}); mesh {dict(run.mesh.shape)}; "
              + (f"resuming at step {self.start_step}" if self.start_step else "starting from scratch"), flush=True)

    def validate(self, state, step: int) -> dict[str, float]:
        run, tc = self.run_, self.tc
        result = evaluate(self.eval_step, state, run.data.eval_batches("val", tc.eval_batches), run.put_batch)
        if self.task.extra_eval is not None and tc.extra_eval:
            run.state = state
            result.update(self.task.extra_eval(run, state, "val", tc.eval_batches))
        if tc.best_metric not in result:
            configlib.fail("train.best_metric", tc.best_metric, "is not among the validation metrics",
                           f"choose one of {sorted(result)}")
        self.writer.write(step, {f"val/{k}": v for k, v in result.items()})
        self.bar.write(f"step {step}: " + ", ".join(f"val {k} {v:.4f}" for k, v in result.items() if k != "tokens"))
        return result

    def save(self, step: int, state, *, evaluated: bool, force: bool = False) -> None:
        best = self.val[self.tc.best_metric] if evaluated and self.val is not None else None
        self.ckpts.save(step, state, _all_data_states(self.it), self.meta, best_value=best, force=force)

    def run(self) -> dict[str, Any]:
        tc, run = self.tc, self.run_
        self._announce()
        key = jax.random.key(tc.seed)
        self.it = run.data.train_iterator(self.data_state)
        self.writer = MetricsWriter(self.workdir, enabled=self.is_main, resume_step=self.start_step or None)
        self.bar = ProgressBar(tc.steps, initial=self.start_step, enabled=self.is_main)
        state, pending = run.state, []
        step = last_saved = last_log_step = self.start_step
        last_log_time, stop_reason = time.time(), "steps"
        try:
            with _StopFlag() as stop, sharding_context(run.mesh):
                while step < tc.steps:
                    batch = run.put_batch(next(self.it))
                    tokens_per_step = batch[self.task.tokens].size
                    t0 = time.time() if self.compile_s is None else None
                    state, metrics = self.train_step(state, batch, key)
                    if t0 is not None:
                        jax.block_until_ready(state.step)
                        self.compile_s = time.time() - t0
                        last_log_time, last_log_step = time.time(), step + 1  # rates exclude the compiling step
                    step += 1
                    pending.append(metrics)
                    if tc.nonfinite == "halt" or step % tc.log_every == 0 or step == tc.steps:
                        logged = _reduce(jax.device_get(pending))  # waits for the interval's steps
                        now = time.time()
                        tok_s = (tokens_per_step * (step - last_log_step) / max(now - last_log_time, 1e-9)
                                 if step > last_log_step else None)
                        self._log(step, logged, tok_s)
                        pending, last_log_time, last_log_step = [], now, step
                    evaluated = step % tc.eval_every == 0 or step == tc.steps
                    if evaluated:
                        self.val = self.validate(state, step)
                    budget_hit = tc.max_minutes is not None and time.time() - self.t_start > 60 * tc.max_minutes
                    if budget_hit or stop.signal is not None:
                        stop_reason = "max_minutes" if budget_hit else signal.Signals(stop.signal).name
                        break
                    if step % tc.checkpoint_every == 0:
                        self.save(step, state, evaluated=evaluated)
                        last_saved = step
                    if not pending and (evaluated or last_saved == step):
                        last_log_time = time.time()  # tokens/s counts training, not validation or saving
                if stop_reason != "steps" and (self.val is None or step % tc.eval_every):
                    self.val = self.validate(state, step)
                if step != last_saved or self.ckpts.latest_step() is None:
                    self.save(step, state, evaluated=True, force=True)
                self.ckpts.wait()
        finally:
            self._close()
        run.state = state
        val = self.val or {}
        return {"step": step, "train_loss": self.train_loss, "val_loss": val.get("loss"),
                "val_perplexity": val.get("perplexity"),
                **{f"val_{k}": v for k, v in val.items() if k not in ("loss", "perplexity", "tokens")},
                "tokens_per_s": _median_rate(self.workdir) if self.is_main else None, "compile_s": self.compile_s,
                "wall_s": time.time() - self.t_start, "params": self.n_params, "stopped": stop_reason,
                "skipped_steps": int(jax.device_get(state.total_skips))}

    def _log(self, step: int, logged: dict, tok_s: float | None) -> None:
        _check_finite(logged, step, self.tc)
        self.train_loss = logged["loss"]
        logged.update(tokens_per_s=tok_s,
                      mfu=tok_s * self.flops_per_token / self.peak if self.peak and tok_s is not None else None)
        self.writer.write(step, {f"train/{k}": v for k, v in logged.items() if v is not None})
        self.bar.update(step, loss=self.train_loss, **({} if tok_s is None else {"tok_s": tok_s}))

    def _close(self) -> None:
        """Always runs: finishes in-flight checkpoint writes (the last good checkpoint must land
        even when training stops on an error), closes logs and the data iterator."""
        try:
            self.ckpts.close()
        except CheckpointError as e:
            log.error("%s", e)
        for thing in (self.bar, self.writer, self.it):
            if thing is not None:
                thing.close()


def _all_data_states(it) -> dict:
    """Every process's data-iterator state (JSON), gathered so that process 0 can save them all."""
    own = json.dumps(it.get_state())
    if jax.process_count() == 1:
        return {"processes": [json.loads(own)]}
    from jax.experimental import multihost_utils

    raw = np.frombuffer(own.encode(), np.uint8)
    longest = int(np.max(multihost_utils.process_allgather(np.array([raw.size]))))
    padded = np.zeros(longest, np.uint8)
    padded[:raw.size] = raw
    gathered = np.asarray(multihost_utils.process_allgather(padded)).reshape(jax.process_count(), longest)
    return {"processes": [json.loads(bytes(row).rstrip(b"\0").decode()) for row in gathered]}


def _own_data_state(saved: dict) -> dict:
    states = saved["processes"]
    if len(states) != jax.process_count():
        raise CheckpointError(f"the checkpoint holds the data position of {len(states)} processes but "
                              f"{jax.process_count()} are running; resume with the same number of processes")
    return states[jax.process_index()]


def _reduce(metrics: list[dict]) -> dict[str, Any]:
    """Token-weighted means of the sums, last values of the rest, over a logging interval."""
    weight = sum(float(m["weight_sum"]) for m in metrics)
    out = {"loss": sum(float(m["loss_sum"]) for m in metrics) / max(weight, 1.0),
           "objective": sum(float(m["objective_sum"]) for m in metrics) / max(weight, 1.0),
           "accuracy": sum(float(m["correct_sum"]) for m in metrics) / max(weight, 1.0),
           "finite": all(bool(m["finite"]) for m in metrics)}
    out["perplexity"] = math.exp(min(out["loss"], 700.0))
    last = metrics[-1]
    for k, v in last.items():
        if k in ("loss_sum", "objective_sum", "correct_sum", "weight_sum", "finite", "nonfinite_grads"):
            continue
        out[k] = np.asarray(v).tolist()
    out["nonfinite_grads"] = next((m["nonfinite_grads"] for m in metrics if not bool(m["finite"])), None)
    return out


def _check_finite(logged: dict, step: int, tc) -> None:
    bad_tree = logged.pop("nonfinite_grads")
    if logged["finite"]:
        return
    names = [jax.tree_util.keystr(p) for p, bad in jax.tree_util.tree_flatten_with_path(bad_tree)[0] if bad]
    where = f"non-finite gradients in {len(names)} parameters: {', '.join(names[:10])}" if names else \
        "a non-finite loss"
    if tc.nonfinite == "halt":
        raise NonFiniteError(f"step {step}: {where}; the update was not applied and no checkpoint of it was "
                             "written. Lower train.optim.lr, check the data, or set train.nonfinite=skip")
    log.warning("step %d: %s; update skipped (%d in a row)", step, where, logged["skips"])
    if logged["skips"] >= tc.max_consecutive_skips:
        raise NonFiniteError(f"step {step}: {logged['skips']} consecutive non-finite steps ({where}); halting. "
                             "Lower train.optim.lr or check the data")


def _median_rate(workdir: str) -> float | None:
    from transformer_jax.train.metrics import read_metrics

    rates = [r["train/tokens_per_s"] for r in read_metrics(workdir) if "train/tokens_per_s" in r]
    return float(np.median(rates[1:] if len(rates) > 2 else rates)) if rates else None


def _peak_flops() -> float | None:
    device = jax.devices()[0]
    known = flops.known_peak_flops(device)
    if known is not None:
        return known * jax.device_count()
    return flops.gemm_peak_flops() * jax.device_count() if device.platform == "cpu" else None


def summary_line(summary: dict) -> str:
    return json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in summary.items()})
