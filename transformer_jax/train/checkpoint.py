"""Orbax checkpoints of a run: the last k steps and the best by validation loss.

Each checkpoint holds ``state`` (params, optimizer state, step), ``data`` (the grain iterator
state, JSON) and ``meta`` (config, tokenizer, metrics, JSON), so a run resumes exactly and
evaluation/sampling can rebuild everything from the checkpoint alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.train.state import TrainState

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (mismatched architecture, corrupt files, ...)."""


TMP_MARKER = ".orbax-checkpoint-tmp"


def _manager(directory: str, *, keep: int, async_save: bool) -> ocp.CheckpointManager:
    """An Orbax manager; leftovers of an interrupted save (``<step>.orbax-checkpoint-tmp``
    directories, never restored) are reported and removed."""
    directory = os.path.abspath(directory)
    partial = sorted(name for name in (os.listdir(directory) if os.path.isdir(directory) else [])
                     if TMP_MARKER in name)
    if partial and jax.process_index() == 0:
        log.warning("ignoring and removing %d incomplete checkpoint(s) in %s left by an interrupted save: %s",
                    len(partial), directory, ", ".join(partial))
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, cleanup_tmp_directories=True,
                                           enable_async_checkpointing=async_save)
    handlers = {"state": ocp.StandardCheckpointHandler(), "data": ocp.JsonCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


def all_finite(tree) -> bool:
    return bool(jax.device_get(jax.tree.reduce(lambda a, b: a & b,
                                               jax.tree.map(lambda x: jax.numpy.all(jax.numpy.isfinite(x)), tree),
                                               True)))


class Checkpoints:
    """``workdir/checkpoints`` (last ``keep``) and ``workdir/best`` (lowest validation loss)."""

    def __init__(self, workdir: str, *, keep: int = 3, keep_best: bool = True, best_mode: str = "min",
                 async_save: bool = True):
        self.workdir = workdir
        self.sign = 1.0 if best_mode == "min" else -1.0
        self.last = _manager(os.path.join(workdir, "checkpoints"), keep=keep, async_save=async_save)
        self.best = _manager(os.path.join(workdir, "best"), keep=1, async_save=async_save) if keep_best else None
        self.best_value = self._read_best_value()

    def _read_best_value(self) -> float:
        """The best metric so far, in "lower is better" form (sign-adjusted)."""
        if self.best is None or self.best.latest_step() is None:
            return float("inf")
        meta = self.best.restore(self.best.latest_step(), args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        value = meta["meta"].get("best_value")
        return float("inf") if value is None else self.sign * float(value)

    def latest_step(self) -> int | None:
        return self.last.latest_step()

    def save(self, step: int, state: TrainState, data_state: dict, meta: dict, *, best_value: float | None = None,
             force: bool = False) -> bool:
        """Saves asynchronously; never writes a state with non-finite parameters. Also saves to
        ``best`` when ``best_value`` (the validation metric) improves. Returns whether a
        checkpoint was written."""
        if not all_finite((state.params, state.model_state)):
            log.error("not saving step %d: the parameters are not finite (the last good checkpoint is kept)", step)
            return False
        meta = {**meta, "step": int(step), **({"best_value": float(best_value)} if best_value is not None else {})}
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
                                  meta=ocp.args.JsonSave(meta))
        with self._write_errors(self.last, step):
            self.last.wait_until_finished()  # one save in flight at a time; surfaces earlier async errors
            saved = self.last.save(step, args=args, force=force)
        if self.best is not None and best_value is not None and self.sign * best_value < self.best_value:
            self.best_value = self.sign * float(best_value)
            with self._write_errors(self.best, step):
                self.best.wait_until_finished()
                self.best.save(step, args=args, force=True)
        return bool(saved)

    @contextlib.contextmanager
    def _write_errors(self, mgr: ocp.CheckpointManager, step: int):
        """Turns a failed (possibly asynchronous) write into a CheckpointError that says what is
        kept, and removes the incomplete directory so the failure frees its space."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - Orbax/TensorStore raise many types for I/O failures
            directory = str(mgr.directory)
            for name in os.listdir(directory) if os.path.isdir(directory) else []:
                if TMP_MARKER in name:
                    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            complete = mgr.all_steps()
            kept = f"the last complete checkpoint (step {max(complete)}) is intact" if complete else \
                "no earlier checkpoint exists"
            no_space = "No space left" in str(e) or getattr(e, "errno", None) == errno.ENOSPC
            hint = "free disk space (or lower train.keep_checkpoints)" if no_space else "fix the cause"
            raise CheckpointError(f"could not write a checkpoint to {directory} (around step {step}): "
                                  f"{'no space left on device' if no_space else e}; {kept}. "
                                  f"{hint.capitalize()} and rerun the same command to resume.") from e

    def restore(self, target: TrainState, step: int | None = None, *, best: bool = False
                ) -> tuple[TrainState, dict, dict]:
        """(state, data_state, meta) of ``step`` (default: latest) onto ``target``'s shapes and
        shardings; a mismatch raises ``CheckpointError`` listing the differing parameters."""
        mgr = self.best if best else self.last
        if mgr is None:
            raise CheckpointError("this run keeps no best checkpoint (train.keep_best=false)")
        step = mgr.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {mgr.directory}")
        self.check_compatible(target, step, mgr)
        restored = mgr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()))
        return restored["state"], restored["data"], restored["meta"]

    def restore_meta(self, step: int | None = None, *, best: bool = False) -> dict:
        mgr = self.best if best else self.last
        step = mgr.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {mgr.directory}")
        return mgr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def check_compatible(self, target: TrainState, step: int, mgr: ocp.CheckpointManager) -> None:
        """Compares saved parameter paths/shapes with the target's before Orbax sees them."""
        try:
            saved = mgr.item_metadata(step)["state"]
        except Exception:  # noqa: BLE001 - metadata unreadable: let restore report it
            return
        if saved is None:
            return
        saved_params = _shapes(getattr(saved, "params", None) or saved.get("params"))
        wanted = _shapes(target.params)
        problems = [f"  {p}: checkpoint has no such parameter (model expects {wanted[p]})" for p in wanted
                    if p not in saved_params]
        problems += [f"  {p}: model has no such parameter (checkpoint has {saved_params[p]})" for p in saved_params
                     if p not in wanted]
        problems += [f"  {p}: checkpoint {saved_params[p]} vs model {wanted[p]}" for p in wanted
                     if p in saved_params and saved_params[p] != wanted[p]]
        if problems:
            raise CheckpointError(
                f"checkpoint {mgr.directory}/{step} does not fit this model ({len(problems)} mismatched "
                "parameters); is this the same architecture and vocabulary?\n" + "\n".join(problems[:40]))

    def wait(self) -> None:
        """Blocks until every asynchronous save is on disk (raises CheckpointError if one failed)."""
        for mgr in (self.last, self.best):
            if mgr is not None:
                with self._write_errors(mgr, mgr.latest_step() or 0):
                    mgr.wait_until_finished()

    def close(self) -> None:
        self.wait()
        self.last.close()
        if self.best is not None:
            self.best.close()


def _shapes(tree: Any) -> dict[str, tuple]:
    if tree is None:
        return {}
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path):
            tuple(x.shape if hasattr(x, "shape") else np.shape(x)) for path, x in flat}
