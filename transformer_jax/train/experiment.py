"""Experiments: a Python file whose ``get_config()`` returns a ``Config``; a run's saved config."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from transformer_jax import configlib
from transformer_jax.train.config import Config


def load_experiment(path: str, overrides: list[str] | None = None) -> Config:
    """The ``Config`` returned by ``get_config()`` in the experiment file ``path``, with
    ``--set``-style ``overrides`` applied."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--config {path}: no such file (experiments live in experiments/*.py)")
    spec = importlib.util.spec_from_file_location(f"experiment_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # experiments may build on each other
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    if not hasattr(module, "get_config"):
        raise ValueError(f"{path} defines no get_config() returning a transformer_jax Config")
    cfg = module.get_config()
    if not isinstance(cfg, Config):
        raise ValueError(f"{path}: get_config() returned {type(cfg).__name__}, not a Config")
    return configlib.apply_overrides(cfg, overrides or [])


def workdir_config(workdir: str, overrides: list[str] | None = None) -> Config:
    """The config a training run saved in ``workdir/config.json``, with ``overrides`` applied."""
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: is {workdir} the --workdir of a training run?")
    with open(path) as f:
        cfg = configlib.from_dict(Config, json.load(f))
    return configlib.apply_overrides(cfg, overrides or [])
