"""Experiments: a Python file whose ``get_config()`` returns a ``Config``; a run's saved config."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import traceback
from typing import Any, cast

from transformer_jax.core import configlib, migration, unread
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides, parse_overrides
from transformer_jax.core.paths import absolute, is_url, user_path
from transformer_jax.data.config import MixtureData
from transformer_jax.train.config import Config


def _where(path: str, err: BaseException) -> str:
    """``FILE, line N`` of the deepest frame of ``err`` inside the experiment file ``path``."""
    if isinstance(err, SyntaxError) and err.lineno is not None:
        return f"{path}, line {err.lineno}"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if os.path.abspath(f.filename) == path]
    return f"{path}, line {frames[-1].lineno}" if frames else path


def _run_experiment_file(path: str) -> Config:
    """``get_config()`` of the file at ``path``; every failure is a ConfigError naming file and line."""
    spec = importlib.util.spec_from_file_location(f"experiment_{os.path.basename(path)[:-3]}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--config {path}: not a Python file (experiments are experiments/*.py)")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)  # experiments may build on each other
    try:
        spec.loader.exec_module(module)
        get_config = getattr(module, "get_config", None)
        if get_config is None:
            raise ConfigError(f"--config {path} defines no get_config() returning a transformer_jax Config")
        cfg = get_config()
    except ConfigError as e:
        raise ConfigError(f"{_where(path, e)}: {e}") from e
    except (Exception, SystemExit) as e:
        detail = e.msg if isinstance(e, SyntaxError) else str(e)
        raise ConfigError(f"--config {_where(path, e)}: {type(e).__name__}: {detail}") from e
    finally:
        sys.path.remove(folder)
    if not isinstance(cfg, Config):
        raise ConfigError(f"--config {path}: get_config() returned {type(cfg).__name__}, not a Config")
    return cfg


def configure(cfg: Config, overrides: list[str] | None = None) -> Config:
    """``cfg`` with ``--set``-style ``overrides`` applied. A field that the chosen variants do not
    read is an error when it is set, in ``cfg`` (a value other than the default) or in ``overrides``."""
    sets = parse_overrides(overrides or [])  # warns once about a repeated key
    cfg = apply_overrides(cfg, [f"{k}={v}" for k, v in sets.items()])
    unread.check_reads(cfg, explicit=sets)
    return cfg


def experiment_config(path: str) -> Config:
    """The ``Config`` returned by ``get_config()`` in the experiment file ``path``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--config {path}: no such file (experiments live in experiments/*.py)")
    return _run_experiment_file(os.path.abspath(path))


def load_experiment(path: str, overrides: list[str] | None = None) -> Config:
    """The experiment file's config (`experiment_config`) with ``overrides`` applied (`configure`)."""
    return configure(experiment_config(path), overrides)


def config_from_dict(saved: dict) -> Config:
    """A run's ``Config`` from a saved dict (config.json, a run summary) of any earlier layout:
    renamed keys are mapped by `core.migration.upgrade`."""
    return configlib.from_dict(Config, migration.upgrade(saved))


def workdir_config(workdir: str, overrides: list[str] | None = None) -> Config:
    """The config a training run saved in ``workdir/config.json``, with ``overrides`` applied (an
    override of a field the run's variants do not read is an error)."""
    path = user_path(workdir, "--workdir") / "config.json"  # a gs:// workdir where the environment provides it
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {workdir} the --workdir of a training run?")
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read as a run's config ({e}); is {workdir} a training run?") from e
    explicit = parse_overrides(overrides or [])
    cfg = apply_overrides(config_from_dict(saved), [f"{k}={v}" for k, v in explicit.items()])
    unread.check_reads(cfg, explicit=explicit, only_explicit=True)
    return cfg


# The dataset fields that hold paths (``data.dataset.FIELD``); ``path`` and ``val_path`` may list
# several, comma-separated.
PATH_FIELDS = (("path", True), ("val_path", True), ("dir", False), ("cache_dir", False))


def _absolute_mixture(text: str) -> str:
    """``data.dataset.mixture`` (``NAME=PATH:WEIGHT,...``, already checked) with each path `absolute`."""
    items = []
    for item in text.split(","):
        name, _, rest = item.partition("=")
        path, _, weight = rest.rpartition(":")
        items.append(f"{name.strip()}={absolute(path)}:{weight.strip()}")
    return ",".join(items)


def absolute_paths(cfg: Config) -> Config:
    """``cfg`` with its relative paths made absolute (against the current directory), so that the
    config a run stores works from any directory; ``train.init_from`` when it names a local path.
    URLs (``gs://...``) stay as given (`transformer_jax.core.paths.absolute`)."""
    sections = {}
    dataset = cfg.data.dataset
    fixed_fields: dict[str, str] = {}
    mixture = dataset.mixture if isinstance(dataset, MixtureData) else None
    if mixture is not None and _absolute_mixture(mixture) != mixture:
        fixed_fields["mixture"] = _absolute_mixture(mixture)
    for name, listed in PATH_FIELDS:
        value = getattr(dataset, name, None)
        if value is None:
            continue
        fixed = ",".join(map(absolute, value.split(","))) if listed else absolute(value)
        if fixed != value:
            fixed_fields[name] = fixed
    if fixed_fields:
        sections["data"] = {"dataset": dataclasses.replace(cast(Any, dataset), **fixed_fields)}  # a dataclass variant
    init_from = cfg.train.init_from
    if init_from is not None and not is_url(init_from) and os.path.exists(init_from):
        sections.setdefault("train", {})["init_from"] = absolute(init_from)
    updates = {s: dataclasses.replace(getattr(cfg, s), **fields) for s, fields in sections.items()}
    return dataclasses.replace(cfg, **updates) if updates else cfg
