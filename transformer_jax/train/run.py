"""A run: data, model, optimizer and state built from a ``Config``, restored from a workdir's checkpoint.

A damaged newest checkpoint is skipped when training (``fallback``): it is set aside as
``<step>.damaged`` with a warning naming it, and the next older one is restored. Readers (eval,
sample) never fall back: they report the damaged checkpoint and the steps that exist.

With ``train.init_from`` a fresh run starts from the pretrained weights (``train.pretrained``) and
their tokenizer. With ``train.lora`` as well, checkpoints hold only the adapters (`checkpoint_view`)
and the base's fingerprint (``meta["base"]``); restoring reads the base again and checks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from transformer_jax.core import configlib
from transformer_jax.core.paths import user_path
from transformer_jax.data import Data, build_data, tokenizer_from_json
from transformer_jax.models.config import with_changes
from transformer_jax.models.lora import apply_lora, join_adapters, split_adapters
from transformer_jax.parallel import batch_sharding, make_mesh, sharding_context
from transformer_jax.parallel.context import check_context, context_devices, lay_out
from transformer_jax.train import pretrained
from transformer_jax.train.checkpoint import CheckpointError, Checkpoints, DamagedCheckpointError
from transformer_jax.train.config import Config, resolve
from transformer_jax.train.optim import make_optimizer
from transformer_jax.train.state import (
    TrainState,
    abstract_state,
    init_state,
    model_graph,
    model_infos,
    state_from_model,
)

log = logging.getLogger("transformer_jax.train")


@dataclasses.dataclass
class Run:
    """Everything a trained run needs for training, evaluation and sampling."""

    cfg: Config
    data: Data
    graphdef: nnx.GraphDef
    mesh: jax.sharding.Mesh
    state: TrainState
    checkpoints: Checkpoints
    put_batch: Callable[[dict[str, np.ndarray]], dict[str, jax.Array]]  # host batch -> sharded device arrays
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    restored_step: int | None = None  # the checkpoint the state came from (None: fresh)
    base: dict | None = None  # train.init_from's fingerprint (train.pretrained.fingerprint)


def checkpoint_view(cfg: Config, state: TrainState) -> TrainState:
    """What a checkpoint holds of ``state``: everything, except that a LoRA run keeps only the
    adapters of its parameters (the frozen base is read from ``train.init_from``)."""
    if cfg.train.lora is None:
        return state
    return dataclasses.replace(state, params=split_adapters(state.params)[0])


def check_batch(cfg: Config, mesh) -> None:
    n_proc = jax.process_count()
    if cfg.train.batch_size % n_proc:
        configlib.fail("train.batch_size", cfg.train.batch_size, f"is not divisible by the {n_proc} processes")
    check_context(cfg.model.kind, cfg.data.seq_len, context_devices(mesh))
    n_batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if cfg.train.batch_size % n_batch_shards:
        configlib.fail(
            "train.batch_size",
            cfg.train.batch_size,
            f"is not divisible by the data x fsdp mesh axes ({n_batch_shards} devices)",
            "change the batch size or the mesh (e.g. --set mesh.data=1 mesh.fsdp=1 ...)",
        )


def _data_and_model(cfg: Config, tokenizer) -> tuple[Config, Any, Any]:
    """(cfg with the data's vocabulary size, data, graphdef); a pretrained model keeps its own
    vocabulary size, which must hold the tokenizer's."""
    n_proc = jax.process_count()
    data = build_data(
        cfg.data,
        batch_size=cfg.train.batch_size // n_proc,
        tokenizer=tokenizer,
        process_index=jax.process_index(),
        process_count=n_proc,
    )
    if cfg.train.init_from is not None:
        if data.vocab_size > cfg.model.dims.vocab_size:
            configlib.fail(
                "model.dims.vocab_size",
                cfg.model.dims.vocab_size,
                f"is smaller than the pretrained tokenizer's {data.vocab_size} ids ({cfg.train.init_from})",
            )
    elif cfg.model.dims.vocab_size != data.vocab_size:
        cfg = dataclasses.replace(cfg, model=with_changes(cfg.model, vocab_size=data.vocab_size))
    return cfg, data, model_graph(cfg.model, cfg.train.lora)[0]


def _restore(cfg: Config, ckpts: Checkpoints, step: int, best: bool, mesh, tx):
    """(cfg, data, graphdef, state, data_state) of checkpoint ``step``."""
    meta = ckpts.restore_meta(step, best=best)
    try:
        tokenizer = tokenizer_from_json(meta["tokenizer"])
    except (ValueError, KeyError, TypeError) as e:
        mgr = ckpts.best if best else ckpts.last
        assert mgr is not None  # restore_meta(best=True) raised if the run keeps no best checkpoint
        raise DamagedCheckpointError(
            f"checkpoint {mgr.directory}/{step} (step {step}) cannot be restored: its tokenizer is damaged ({e})"
        ) from e
    cfg, data, graphdef = _data_and_model(cfg, tokenizer)
    lora = cfg.train.lora
    with sharding_context(mesh):
        target = abstract_state(cfg.model, tx, mesh=mesh, lora=lora)
        state, data_state, _ = ckpts.restore(checkpoint_view(cfg, target), step, best=best)
    if lora is not None:
        if not isinstance(meta.get("base"), dict):
            raise CheckpointError(f"checkpoint {step} of {ckpts.workdir} is of a LoRA run but records no base model")
        where = f"checkpoint {step} of {ckpts.workdir}"
        pretrained.check_fingerprint(meta["base"], where)
        with sharding_context(mesh):
            base_params, _, _ = pretrained.load_base(meta["base"], cfg.model, mesh)
        state = dataclasses.replace(state, params=join_adapters(base_params, state.params))
    return cfg, data, graphdef, state, data_state, meta.get("base")


def _from_pretrained(cfg: Config, mesh, tx) -> tuple[Config, Any, Any, TrainState, dict]:
    """(cfg, data, graphdef, state, base fingerprint) of a fresh run from ``train.init_from``."""
    path = cfg.train.init_from
    assert path is not None  # only called with init_from
    pretrained.check_model(cfg.model, path)
    base = pretrained.fingerprint(path, step=pretrained.latest_step(path))
    with sharding_context(mesh):
        params, rest, tokenizer = pretrained.load_base(base, cfg.model, mesh)
        cfg, data, graphdef = _data_and_model(cfg, tokenizer)
        model = nnx.merge(model_graph(cfg.model)[0], params, rest)
        if cfg.train.lora is not None:
            apply_lora(model, cfg.train.lora, seed=cfg.train.seed)
        state = state_from_model(model, tx, mesh=mesh)
    return cfg, data, graphdef, state, base


def setup(
    cfg: Config,
    workdir: str,
    *,
    restore: bool = True,
    best: bool = False,
    devices=None,
    restore_step: int | None = None,
    fallback: bool = False,
) -> tuple[Run, dict | None]:
    """Builds data, model, optimizer and state; restores the latest (or best, or ``restore_step``)
    checkpoint of ``workdir`` when there is one. Returns the run and the restored data-iterator
    states (``{"processes": [state of each training process]}``). ``devices`` (default: all) are
    arranged into the mesh of ``cfg.mesh``. With ``fallback`` a damaged checkpoint is set aside and
    the next older one restored (never with an explicit ``restore_step``)."""
    cfg = resolve(cfg)
    user_path(workdir, "--workdir").mkdir(parents=True, exist_ok=True)  # gs:// where the environment has it
    tc = cfg.train
    mesh = make_mesh(cfg.mesh, devices)
    check_batch(cfg, mesh)
    saves = tc.checkpoint
    best_mode = "min" if saves.best is None else saves.best.mode
    ckpts = Checkpoints(workdir, keep=saves.keep, keep_best=saves.best is not None, best_mode=best_mode)
    try:
        return _restore_or_init(cfg, workdir, ckpts, mesh, restore, best, restore_step, fallback)
    except BaseException:  # an Orbax manager left open logs "cannot schedule new futures" at exit
        with contextlib.suppress(Exception):  # the error that stopped setup is the one to report
            ckpts.close()
        raise


def _restore_or_init(cfg, workdir, ckpts, mesh, restore, best, restore_step, fallback) -> tuple[Run, dict | None]:
    tc = cfg.train
    infos = model_infos(cfg.model, tc.lora)
    tx, schedule = make_optimizer(tc.optim, tc.steps, infos=infos, adapters_only=tc.lora is not None)
    shardings = {ndim: batch_sharding(mesh, ndim) for ndim in (1, 2)}  # [B] source ids, [B, T] rows

    n_context = context_devices(mesh)

    def put_batch(batch: dict) -> dict:
        batch = lay_out(batch, n_context)  # the zigzag order of context parallelism (n_context > 1)
        return {
            k: jax.make_array_from_process_local_data(shardings[np.ndim(v)], np.asarray(v)) for k, v in batch.items()
        }

    def run_of(cfg, data, graphdef, state, step, base):
        return Run(cfg, data, graphdef, mesh, state, ckpts, put_batch, tx, schedule, step, base)

    if restore_step is not None:
        candidates = [ckpts.resolve_step(restore_step, best=best)]
    else:
        candidates = ckpts.steps(best=best) if restore else []
    skipped = []
    for step in candidates:
        try:
            cfg_s, data, graphdef, state, data_state, base = _restore(cfg, ckpts, step, best, mesh, tx)
        except DamagedCheckpointError as e:
            if not fallback or restore_step is not None:
                raise
            skipped.append(ckpts.set_aside(step, best=best))
            log.warning("%s; set it aside as %s and trying the previous checkpoint", e, skipped[-1])
            continue
        if skipped:
            log.warning("restored step %d after skipping %d damaged checkpoint(s)", step, len(skipped))
        return run_of(cfg_s, data, graphdef, state, step, base), data_state
    if skipped:
        raise CheckpointError(
            f"no checkpoint of {workdir} restores; the damaged ones are kept as {', '.join(skipped)}. "
            "Rerun to start from scratch, or restore one of them by hand"
        )
    if tc.init_from is not None:
        cfg, data, graphdef, state, base = _from_pretrained(cfg, mesh, tx)
        return run_of(cfg, data, graphdef, state, None, base), None
    cfg, data, graphdef = _data_and_model(cfg, None)
    with sharding_context(mesh):
        state = init_state(cfg.model, tx, seed=tc.seed, mesh=mesh)
    return run_of(cfg, data, graphdef, state, None, None), None
