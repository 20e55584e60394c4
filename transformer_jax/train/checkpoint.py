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
import traceback
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from transformer_jax.core.paths import user_path
from transformer_jax.train.state import TrainState

log = logging.getLogger(__name__)


def _orbax_errors_without_traceback(record: logging.LogRecord) -> bool:
    """Orbax logs a failed asynchronous write (e.g. a full disk) with its traceback, from each of
    its threads and again whenever it is waited for; ``Checkpoints`` raises the failure as a
    ``CheckpointError`` that says what happened and what is kept (the cause chained to it, shown
    with TRANSFORMER_JAX_DEBUG=1), so those records keep their message and drop the traceback."""
    if not record.exc_info:
        return True
    tb = record.exc_info[2]
    where = [record.pathname, record.getMessage(), *(frame.f_code.co_filename for frame, _ in traceback.walk_tb(tb))]
    if any(f"{os.sep}orbax{os.sep}" in w or "orbax.checkpoint" in w for w in where):
        record.exc_info, record.exc_text = None, None
    return True


for _logger in ("absl", "asyncio"):  # Orbax logs through absl; its unawaited tasks through asyncio
    logging.getLogger(_logger).addFilter(_orbax_errors_without_traceback)


def _no_space(e: BaseException) -> bool:
    """Whether ``e`` or an exception it wraps (its cause or context, a group's members) is a full
    disk (ENOSPC): an asynchronous writer may raise it wrapped."""
    todo, seen = [e], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if getattr(x, "errno", None) == errno.ENOSPC or "No space left" in str(x):
            return True
        todo += [c for c in (x.__cause__, x.__context__) if c is not None]
        todo += list(getattr(x, "exceptions", ()))
    return False


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (mismatched architecture, corrupt files, ...)."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint's files cannot be read (truncated, corrupt, missing): an older one may still restore."""


DAMAGED_SUFFIX = ".damaged"
SUPERSEDED_SUFFIX = ".superseded"  # later checkpoints of a run restarted from an earlier step


TMP_MARKER = ".orbax-checkpoint-tmp"


def _manager(directory: epath.Path, *, keep: int, async_save: bool) -> ocp.CheckpointManager:
    """An Orbax manager; leftovers of an interrupted save (``<step>.orbax-checkpoint-tmp``
    directories, never restored) are reported and removed. Its multi-host barriers carry the
    directory's name as a prefix, so they cannot be mistaken for another manager's."""
    partial = sorted(p.name for p in (directory.iterdir() if directory.is_dir() else []) if TMP_MARKER in p.name)
    if partial and jax.process_index() == 0:
        log.warning(
            "ignoring and removing %d incomplete checkpoint(s) in %s left by an interrupted save: %s",
            len(partial),
            directory,
            ", ".join(partial),
        )
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        create=True,
        cleanup_tmp_directories=True,
        enable_async_checkpointing=async_save,
        multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=directory.name),
    )
    handlers = {
        "state": ocp.StandardCheckpointHandler(),
        "data": ocp.JsonCheckpointHandler(),
        "meta": ocp.JsonCheckpointHandler(),
    }
    return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


def all_finite(tree) -> bool:
    return bool(
        jax.device_get(
            jax.tree.reduce(
                lambda a, b: a & b, jax.tree.map(lambda x: jax.numpy.all(jax.numpy.isfinite(x)), tree), True
            )
        )
    )


class Checkpoints:
    """``workdir/checkpoints`` (last ``keep``) and ``workdir/best`` (lowest validation loss)."""

    def __init__(
        self, workdir: str, *, keep: int = 3, keep_best: bool = True, best_mode: str = "min", async_save: bool = True
    ):
        self.workdir = workdir
        self.sign = 1.0 if best_mode == "min" else -1.0
        root = user_path(workdir, "--workdir")  # a gs:// workdir works where the environment provides it
        try:
            self.last = _manager(root / "checkpoints", keep=keep, async_save=async_save)
            self.best = _manager(root / "best", keep=1, async_save=async_save) if keep_best else None
        except ImportError as e:  # Orbax asks google-cloud-storage about a gs:// bucket
            raise CheckpointError(
                f"--workdir {root}: Orbax cannot open checkpoints there in this environment ({e}); install "
                "what the scheme needs (gs://: google-cloud-storage and gcsfs) or give a local --workdir"
            ) from None
        self.best_value = self._read_best_value()

    def _read_best_value(self) -> float:
        """The best metric so far, in "lower is better" form (sign-adjusted)."""
        if self.best is None or self.best.latest_step() is None:
            return float("inf")
        step = self.best.latest_step()
        try:
            meta = self.best.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            value = meta["meta"].get("best_value")
        except Exception as e:
            log.warning(
                "the best checkpoint %s/%s cannot be read (%s); the next validation replaces it",
                self.best.directory,
                step,
                type(e).__name__,
            )
            return float("inf")
        return float("inf") if value is None else self.sign * float(value)

    def latest_step(self) -> int | None:
        return self.last.latest_step()

    def steps(self, *, best: bool = False) -> list[int]:
        """The complete checkpoints' steps, newest first."""
        mgr = self._manager(best)
        return sorted(mgr.all_steps(), reverse=True)

    def _manager(self, best: bool) -> ocp.CheckpointManager:
        if best and self.best is None:
            raise CheckpointError("this run keeps no best checkpoint (train.checkpoint.best=none)")
        return self.best if best and self.best is not None else self.last

    def _damaged(self, mgr: ocp.CheckpointManager, step: int, what: str, err: Exception) -> DamagedCheckpointError:
        steps = sorted(mgr.all_steps())
        detail = (str(err).splitlines() or [""])[0]
        detail = detail if len(detail) <= 160 else detail[:157] + "..."
        return DamagedCheckpointError(
            f"checkpoint {mgr.directory}/{step} (step {step}) cannot be restored: its {what} is damaged "
            f"({type(err).__name__}: {detail}); steps in "
            f"{mgr.directory}: {', '.join(map(str, steps)) or 'none'} (choose one with --restore-step N)"
        )

    def set_aside(self, step: int, *, best: bool = False, suffix: str = DAMAGED_SUFFIX) -> str:
        """Renames the checkpoint of ``step`` to ``<step><suffix>`` (kept for inspection, never
        restored, and out of the way of a new save of that step); returns the new path."""
        mgr = self._manager(best)
        src = epath.Path(mgr.directory) / str(step)
        dst = src.parent / f"{src.name}{suffix}"
        n = 1
        while dst.exists():
            dst, n = src.parent / f"{src.name}{suffix}{n}", n + 1
        if jax.process_index() == 0:
            src.rename(dst)
        mgr.reload()
        return str(dst)

    def save(
        self,
        step: int,
        state: TrainState,
        data_state: dict,
        meta: dict,
        *,
        best_value: float | None = None,
        force: bool = False,
    ) -> bool:
        """Saves asynchronously; never writes a state with non-finite parameters. Also saves to
        ``best`` when ``best_value`` (the validation metric) improves. Returns whether a
        checkpoint was written."""
        if not all_finite((state.params, state.model_state)):
            log.error("not saving step %d: the parameters are not finite (the last good checkpoint is kept)", step)
            return False
        meta = {**meta, "step": int(step), **({"best_value": float(best_value)} if best_value is not None else {})}
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state), meta=ocp.args.JsonSave(meta)
        )
        self._settle(step)
        with self._write_errors(self.last, step):
            saved = self.last.save(step, args=args, force=force)
        if self.best is not None and best_value is not None and self.sign * best_value < self.best_value:
            self.best_value = self.sign * float(best_value)
            self._settle(step)
            with self._write_errors(self.best, step):
                self.best.save(step, args=args, force=True)
        return bool(saved)

    def _settle(self, step: int) -> None:
        """Waits until no save is in flight, in either manager (surfacing an earlier async error).
        Two multi-host saves in flight at once, one per manager, ran Orbax's barriers side by side
        under the same names (``set_value_start``, ``async_commit_complete.<step>``): "Barrier ...
        is already ongoing", or a hang of up to 300 s. So saves run one after the other."""
        for mgr in (self.last, self.best):
            if mgr is not None:
                with self._write_errors(mgr, step):
                    mgr.wait_until_finished()

    @contextlib.contextmanager
    def _write_errors(self, mgr: ocp.CheckpointManager, step: int):
        """Turns a failed (possibly asynchronous) write into a CheckpointError that says what is
        kept, and removes the incomplete directory so the failure frees its space."""
        try:
            yield
        except Exception as e:
            directory = epath.Path(mgr.directory)
            for path in directory.iterdir() if directory.is_dir() else []:
                if TMP_MARKER in path.name:
                    with contextlib.suppress(OSError):
                        path.rmtree(missing_ok=True)
            with contextlib.suppress(Exception):  # the steps on disk: a failed save leaves Orbax's list wrong
                mgr.reload()
            complete = mgr.all_steps()
            kept = (
                f"the last complete checkpoint (step {max(complete)}) is intact"
                if complete
                else "no earlier checkpoint exists"
            )
            no_space = _no_space(e)
            hint = "free disk space (or lower train.checkpoint.keep)" if no_space else "fix the cause"
            raise CheckpointError(
                f"could not write a checkpoint to {directory} (around step {step}): "
                f"{'no space left on device' if no_space else e}; {kept}. "
                f"{hint.capitalize()} and rerun the same command to resume."
            ) from e

    def restore(
        self, target: TrainState, step: int | None = None, *, best: bool = False
    ) -> tuple[TrainState, dict, dict]:
        """(state, data_state, meta) of ``step`` (default: latest) onto ``target``'s shapes and
        shardings; a mismatch raises ``CheckpointError`` listing the differing parameters."""
        mgr = self._manager(best)
        step = self.resolve_step(step, best=best)
        self.check_compatible(target, step, mgr)
        try:
            restored = mgr.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()
                ),
            )
        except CheckpointError:
            raise
        except Exception as e:
            raise self._damaged(mgr, step, "state, data position or metadata", e) from e
        return restored["state"], restored["data"], restored["meta"]

    def resolve_step(self, step: int | None, *, best: bool = False) -> int:
        """``step`` if it has a complete checkpoint (None: the latest); else a CheckpointError listing the steps."""
        mgr = self._manager(best)
        steps = sorted(mgr.all_steps())
        if step is None:
            if not steps:
                raise CheckpointError(f"no checkpoint in {mgr.directory}")
            return steps[-1]
        if step not in steps:
            raise CheckpointError(
                f"--restore-step {step}: {mgr.directory} has no checkpoint of step {step}; "
                f"steps: {', '.join(map(str, steps)) or 'none'}"
            )
        return step

    def restore_meta(self, step: int | None = None, *, best: bool = False) -> dict:
        mgr = self._manager(best)
        step = self.resolve_step(step, best=best)
        try:
            meta = mgr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as e:
            raise self._damaged(mgr, step, "metadata (meta/)", e) from e
        if not isinstance(meta, dict) or "tokenizer" not in meta:
            raise self._damaged(mgr, step, "metadata (meta/)", ValueError("no tokenizer in it"))
        return meta

    def check_compatible(self, target: TrainState, step: int, mgr: ocp.CheckpointManager) -> None:
        """Compares saved parameter paths/shapes with the target's before Orbax sees them."""
        try:
            saved = mgr.item_metadata(step)["state"]
        except Exception:
            return
        if saved is None:
            return
        saved_params = _shapes(getattr(saved, "params", None) or saved.get("params"))
        wanted = _shapes(target.params)
        problems = [
            f"  {p}: checkpoint has no such parameter (model expects {wanted[p]})"
            for p in wanted
            if p not in saved_params
        ]
        problems += [
            f"  {p}: model has no such parameter (checkpoint has {saved_params[p]})"
            for p in saved_params
            if p not in wanted
        ]
        problems += [
            f"  {p}: checkpoint {saved_params[p]} vs model {wanted[p]}"
            for p in wanted
            if p in saved_params and saved_params[p] != wanted[p]
        ]
        if problems:
            raise CheckpointError(
                f"checkpoint {mgr.directory}/{step} does not fit this model ({len(problems)} mismatched "
                "parameters); is this the same architecture and vocabulary?\n" + "\n".join(problems[:40])
            )

    def wait(self) -> None:
        """Blocks until every asynchronous save is on disk (raises CheckpointError if one failed)."""
        self._settle(self.last.latest_step() or 0)

    def close(self) -> None:
        self.wait()
        self.last.close()
        if self.best is not None:
            self.best.close()


def _shapes(tree: Any) -> dict[str, tuple]:
    if tree is None:
        return {}
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path): tuple(
            x.shape if hasattr(x, "shape") else np.shape(x)
        )
        for path, x in flat
    }
