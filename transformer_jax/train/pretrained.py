"""Pretrained starting weights (``train.init_from``): a Hugging Face model directory or a run's workdir.

- `base_kind`: ``hf`` (``config.json`` + ``model.safetensors`` or its ``.index.json``) or ``run``
  (our workdir: ``config.json`` + ``checkpoints/``).
- `init_from_experiment`: an experiment ``Config`` whose model is the pretrained one (`with_init_from`),
  then the overrides, then the checks (`check_init_from`): ``--set model.X`` may change only
  `RUNTIME_FIELDS` (how the same weights are computed); any other model field that differs from the
  pretrained config is an error naming it, as is a tokenizer setting (the run uses the pretrained
  tokenizer).
- `fingerprint` / `check_fingerprint`: sizes and sampled SHA-256 of the base's weight files,
  recorded in every checkpoint of a LoRA run (which holds only the adapters), so that a base that
  changed since is reported instead of silently combined with adapters trained on another one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from transformer_jax.core import configlib, unread
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides, parse_overrides
from transformer_jax.core.paths import require_local
from transformer_jax.data import tokenizer_from_json
from transformer_jax.data.config import CorpusData
from transformer_jax.data.tokenizer_config import CharSettings
from transformer_jax.models.config import RUNTIME_FIELDS, ModelConfig
from transformer_jax.parallel import state_shardings
from transformer_jax.train.checkpoint import CheckpointError
from transformer_jax.train.config import Config
from transformer_jax.train.experiment import workdir_config
from transformer_jax.train.optim import make_optimizer
from transformer_jax.train.state import abstract_state, model_graph, model_infos, split_model

_WHOLE = 4 << 20  # files up to this size are hashed whole
_BLOCK, _BLOCKS = 1 << 20, 16  # else: the first and last MiB and 16 MiB-blocks evenly spaced between


_LOCAL_WHY = "pretrained weights are fingerprinted and read as local files"


def base_kind(path: str, *, weights: bool = True) -> str:
    """``hf`` or ``run``; anything else is an error naming ``path``. ``weights=False``: a Hugging Face
    directory may hold its config.json alone (what compiling for a target reads)."""
    where = f"train.init_from={path!r}"
    require_local(path, "train.init_from", _LOCAL_WHY)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where}: no such directory")
    if not os.path.isdir(path):
        raise ConfigError(f"{where} is a file; give a Hugging Face model directory or a run's workdir")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(f"{where} has no config.json: neither a Hugging Face model directory nor a run's workdir")
    if os.path.isdir(os.path.join(path, "checkpoints")):
        return "run"
    if not weights or any(
        os.path.isfile(os.path.join(path, f)) for f in ("model.safetensors", "model.safetensors.index.json")
    ):
        return "hf"
    raise ConfigError(
        f"{where}: no model.safetensors (or model.safetensors.index.json) and no checkpoints/: neither a "
        "Hugging Face model directory with safetensors weights nor a run's workdir"
    )


def pretrained_model_config(path: str, *, weights: bool = True) -> ModelConfig:
    """The ModelConfig of the base at ``path`` (read from its config.json; no weights loaded;
    ``weights``: as `base_kind`)."""
    if base_kind(path, weights=weights) == "run":
        base = workdir_config(path)
        if base.train.lora is not None:
            raise ConfigError(
                f"train.init_from={path!r} is a LoRA run; export it with `transformer-jax export` (adapters "
                "merged) and start from the exported directory"
            )
        return base.model
    from transformer_jax.models.hf import config_from_hf, read_hf_config

    try:
        return config_from_hf(read_hf_config(path))
    except ValueError as e:
        raise ConfigError(f"train.init_from={path!r}: {e}") from e


def with_init_from(
    cfg: Config, path: str, overrides: list[str] | None = None, *, pretrained: ModelConfig | None = None
) -> Config:
    """``cfg`` starting from the base at ``path`` (``train.init_from`` set, the model replaced by the
    pretrained one, ``pretrained`` or read from its config.json; no weights loaded), then
    ``overrides``, validated once."""
    path = require_local(path, "train.init_from", _LOCAL_WHY)
    model = pretrained_model_config(path) if pretrained is None else pretrained
    start = {"model": model, "train": dataclasses.replace(cfg.train, init_from=path)}
    return apply_overrides(cfg, overrides or [], replace=start)


def check_init_from(
    cfg: Config, path: str, explicit: dict[str, str], pretrained: ModelConfig, *, weights: bool = True
) -> None:
    """What a run from the base at ``path`` may not change: its model (`check_model`), a tokenizer
    setting of ``cfg.data.dataset`` (the run uses the pretrained tokenizer) or, with a Hugging Face
    tokenizer, document packing."""
    check_model(cfg.model, path, pretrained=pretrained, explicit=explicit)
    dataset = cfg.data.dataset
    if isinstance(dataset, CorpusData):
        given = [key for key in explicit if key.startswith("data.dataset.tokenizer")]
        if given or dataset.tokenizer != CharSettings():
            shown = given[0] if given else f"data.dataset.tokenizer={dataset.tokenizer.kind!r}"
            raise ConfigError(
                f"{shown} is not read with --init-from: the run uses the pretrained tokenizer of {path}; "
                "remove the setting"
            )
    if getattr(dataset, "packing", None) == "documents" and base_kind(path, weights=weights) == "hf":
        raise ConfigError(
            "data.dataset.packing='documents' frames documents with this package's BOS/EOS ids (1, 2), not the "
            f"pretrained tokenizer's of {path}; use data.dataset.packing=stream"
        )


def check_model(
    model: ModelConfig, path: str, *, pretrained: ModelConfig | None = None, explicit: dict[str, str] | None = None
) -> None:
    """``model`` must be the pretrained model of ``path`` (``pretrained``, or read from it) up to
    `RUNTIME_FIELDS`; the error names the ``--set`` key of ``explicit`` that changed a field, if one
    did (a config whose ``train.init_from`` was set by ``--set`` may differ anywhere)."""
    pretrained = pretrained_model_config(path) if pretrained is None else pretrained
    differ = [
        (f"model.{name}", before, after)
        for name, before, after in configlib.changed_fields(configlib.to_dict(pretrained), configlib.to_dict(model))
        if name.split(".")[0] not in RUNTIME_FIELDS
    ]
    if not differ:
        return
    for key, value in (explicit or {}).items():
        for name, before, _ in differ:
            if name == key or name.startswith(f"{key}."):
                raise ConfigError(
                    f"--set {key}={value}: conflicts with the pretrained model "
                    f"({name}={before!r} in {path}/config.json); with --init-from only "
                    f"{', '.join('model.' + f for f in RUNTIME_FIELDS)} may be set"
                )
    name, before, after = differ[0]
    raise ConfigError(
        f"{name}={after!r} differs from the pretrained model's {before!r} "
        f"({path}){f' (and {len(differ) - 1} more fields)' if len(differ) > 1 else ''}: with train.init_from "
        "the model config comes from it; use train --init-from DIR"
    )


def init_from_experiment(
    config: Config | None, path: str, overrides: list[str] | None = None, *, weights: bool = True
) -> Config:
    """The config of ``train --init-from path [--config SPEC] [--set ...]``, in one pass: ``config``
    (the recipe's or experiment file's; default: ``Config()``) starting from the base (`with_init_from`),
    then the ``overrides``, then one validation (`unread.check_reads`, `check_init_from`); the base's
    config.json is read once. ``weights=False`` (``compile --init-from``): its config.json suffices."""
    sets = parse_overrides(overrides or [])
    if sets.get("train.init_from", path) != path:
        raise ConfigError(f"--set train.init_from={sets['train.init_from']} contradicts --init-from {path}")
    sets.pop("train.init_from", None)
    path = require_local(path, "train.init_from", _LOCAL_WHY)
    pretrained = pretrained_model_config(path, weights=weights)
    base = Config() if config is None else config
    cfg = with_init_from(base, path, [f"{k}={v}" for k, v in sets.items()], pretrained=pretrained)
    unread.check_reads(cfg, explicit=sets)
    check_init_from(cfg, path, sets, pretrained, weights=weights)
    return cfg


# Fingerprints --------------------------------------------------------------------------------


def _file_digest(path: str, size: int) -> str:
    """SHA-256 of the whole file (small files) or of the size, the first and last MiB and
    `_BLOCKS` MiB-blocks evenly spaced between (weight files: any retraining changes them all)."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= _WHOLE:
            h.update(f.read())
            return h.hexdigest()
        for i in range(_BLOCKS + 2):
            f.seek((size - _BLOCK) * i // (_BLOCKS + 1))
            h.update(f.read(_BLOCK))
    return h.hexdigest()


def _weight_files(path: str, kind: str, step: int | None) -> tuple[str, list[str]]:
    if kind == "run":
        root = os.path.join(path, "checkpoints", str(step))
        if not os.path.isdir(root):
            raise ConfigError(f"the base checkpoint {root} (step {step}) no longer exists")
        names = [
            os.path.relpath(os.path.join(d, f), root)
            for d, _, files in os.walk(os.path.join(root, "state"))
            for f in files
        ]
        return root, sorted(names)
    names = [f for f in os.listdir(path) if f.endswith(".safetensors") or f in ("config.json",)]
    names += [f for f in ("model.safetensors.index.json",) if os.path.isfile(os.path.join(path, f))]
    return path, sorted(set(names))


def fingerprint(path: str, *, step: int | None = None) -> dict[str, Any]:
    """``{"kind", "path", "step", "files": {name: {"size", "sha256"}}}`` of the base at ``path``
    (a run's base is its checkpoint ``step``); see `_file_digest` for what is hashed."""
    kind = base_kind(path)
    root, names = _weight_files(path, kind, step)
    files = {}
    for name in names:
        full = os.path.join(root, name)
        size = os.path.getsize(full)
        files[name] = {"size": size, "sha256": _file_digest(full, size)}
    return {"kind": kind, "path": os.path.abspath(path), "step": step, "files": files}


def check_fingerprint(saved: dict[str, Any], where: str) -> None:
    """Raises ``ConfigError`` naming the files of the base that differ from ``saved`` (a
    checkpoint's record of the base its adapters were trained on)."""
    path = saved["path"]
    try:
        now = fingerprint(path, step=saved.get("step"))
    except (FileNotFoundError, ConfigError) as e:
        raise ConfigError(f"{where} holds LoRA adapters of the base {path}, which cannot be read now: {e}") from e
    old, new = saved["files"], now["files"]
    changes = [f"{n}: missing now" for n in old if n not in new]
    changes += [f"{n}: new file" for n in new if n not in old]
    for n in sorted(set(old) & set(new)):
        if old[n]["size"] != new[n]["size"]:
            changes.append(f"{n}: size {old[n]['size']} -> {new[n]['size']}")
        elif old[n]["sha256"] != new[n]["sha256"]:
            changes.append(f"{n}: content changed (same size)")
    if changes:
        raise ConfigError(
            f"{where} holds LoRA adapters trained on the base {path}, which has changed since: "
            + "; ".join(changes[:5])
            + ("" if len(changes) <= 5 else f" (and {len(changes) - 5} more)")
            + ". Restore that base (or start a new run from the new one)"
        )


# Loading ---------------------------------------------------------------------------------------


def _restack(tree: Any, target: Any, where: str) -> Any:
    """``tree`` laid out like ``target``: a loop stack ``{0: layer, 1: layer, ...}`` stacked into a
    scanned one (leading ``layers`` axis), or a scanned one split into a loop stack."""
    if not isinstance(target, dict) or not isinstance(tree, dict):
        return tree
    int_keys = lambda d: bool(d) and all(isinstance(k, int) for k in d)
    if int_keys(tree) and not int_keys(target):
        layers = [tree[i] for i in sorted(tree)]
        return _restack(jax.tree.map(lambda *xs: jnp.stack(xs), *layers), target, where)
    if int_keys(target) and not int_keys(tree):
        n = len(target)
        return {i: _restack(jax.tree.map(lambda x, i=i: x[i], tree), target[i], where) for i in range(n)}
    return {k: _restack(v, target.get(k), where) for k, v in tree.items()}


def fit_to(tree: Any, target: Any, where: str) -> Any:
    """``tree`` (pure dict of arrays) in the layout, shapes and dtypes of ``target`` (pure dict of
    ``ShapeDtypeStruct``s): scanned/unscanned stacks converted, dtypes cast; a missing, extra or
    differently shaped parameter is a ``ConfigError`` listing them."""
    tree = _restack(tree, target, where)
    have = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
    want = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(target)[0]}
    problems = [f"{p}: missing in the base" for p in want if p not in have]
    problems += [f"{p}: not in the model" for p in have if p not in want]
    problems += [
        f"{p}: base {tuple(have[p].shape)} vs model {tuple(want[p].shape)}"
        for p in want
        if p in have and tuple(have[p].shape) != tuple(want[p].shape)
    ]
    if problems:
        raise ConfigError(f"{where} does not fit the model ({len(problems)} parameters): " + "; ".join(problems[:8]))
    return jax.tree.map(lambda x, t: x if x.dtype == t.dtype else x.astype(t.dtype), tree, target)


def _read_run_checkpoint(path: str, step: int, mesh) -> tuple[Any, Any, Any]:
    """(params, model_state, tokenizer) of checkpoint ``step`` of the run ``path``, read-only."""
    base_cfg = workdir_config(path)
    tx = make_optimizer(base_cfg.train.optim, base_cfg.train.steps, infos=model_infos(base_cfg.model)).tx
    target = abstract_state(base_cfg.model, tx, mesh=mesh)
    options = ocp.CheckpointManagerOptions(create=False, enable_async_checkpointing=False)
    handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    with ocp.CheckpointManager(os.path.join(path, "checkpoints"), options=options, item_handlers=handlers) as mgr:
        try:
            restored = mgr.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
            )
        except Exception as e:
            raise CheckpointError(f"the base checkpoint {path}/checkpoints/{step} cannot be read: {e}") from e
    state, meta = restored["state"], restored["meta"]
    return state.params, state.model_state, tokenizer_from_json(meta["tokenizer"])


def latest_step(path: str) -> int | None:
    """The newest complete checkpoint of the run ``path`` (None for a Hugging Face directory)."""
    if base_kind(path) != "run":
        return None
    options = ocp.CheckpointManagerOptions(create=False, enable_async_checkpointing=False)
    with ocp.CheckpointManager(os.path.join(path, "checkpoints"), options=options) as mgr:
        step = mgr.latest_step()
    if step is None:
        raise ConfigError(f"train.init_from={path!r}: the run has no checkpoint yet")
    return step


def load_base(base: dict[str, Any], model: ModelConfig, mesh) -> tuple[Any, Any, Any]:
    """(params, model_state, tokenizer) of the base ``base`` (a `fingerprint`), as pure dicts laid
    out for ``model`` (a loop or scanned stack, its param dtype) and placed on ``mesh``."""
    path = base["path"]
    if base["kind"] == "run":
        params, rest, tokenizer = _read_run_checkpoint(path, base["step"], mesh)
    else:
        from transformer_jax.data.hf_tokenizer import HFTokenizer
        from transformer_jax.models.hf import from_pretrained

        run = model.execution
        _, pretrained = from_pretrained(path, dtype=run.param_dtype, mesh=mesh, scan_layers=run.scan_layers)
        _, params, rest = split_model(pretrained)
        params, rest = nnx.to_pure_dict(params), nnx.to_pure_dict(rest)
        tokenizer = HFTokenizer.from_pretrained(path)
    _, params_abs, rest_abs = model_graph(model)
    where = f"the base {path}"
    params = fit_to(params, nnx.to_pure_dict(params_abs), where)
    rest = fit_to(rest, nnx.to_pure_dict(rest_abs), where)
    place = lambda tree, abstract: jax.device_put(tree, nnx.to_pure_dict(state_shardings(abstract, mesh)))
    return place(params, params_abs), place(rest, rest_abs), tokenizer


__all__ = [
    "RUNTIME_FIELDS",
    "base_kind",
    "check_fingerprint",
    "check_init_from",
    "check_model",
    "fingerprint",
    "fit_to",
    "init_from_experiment",
    "latest_step",
    "load_base",
    "pretrained_model_config",
    "with_init_from",
]
