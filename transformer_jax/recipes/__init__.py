"""Training recipes shipped with the package, chosen by name: ``train --config shakespeare_char``.

Each recipe is a module here whose ``get_config()`` returns a ``Config``; ``RECIPES`` maps its name
to a one-line description. ``--config`` also takes an experiment file (``experiments/*.py``, which
import these recipes), so a file path and a name work alike: `load_config` resolves either.
"""

from __future__ import annotations

import importlib
import os

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.paths import require_local
from transformer_jax.core.registry import Registry, did_you_mean
from transformer_jax.train.config import Config
from transformer_jax.train.experiment import configure, experiment_config

RECIPES: Registry[str] = Registry("recipe")
RECIPES.register("shakespeare_char", "nanoGPT's CPU recipe: character-level Shakespeare, 4 layers, d_model 128")
RECIPES.register("shakespeare_char_llama", "shakespeare_char with LLaMA's choices (RMSNorm, RoPE, SwiGLU)")
RECIPES.register("shakespeare_char_moe", "shakespeare_char with 8 GELU experts, top-2, at equal active parameters")
RECIPES.register("shakespeare_char_lstm", "a 2-layer LSTM at shakespeare_char's budget and parameter count")
RECIPES.register("shakespeare_char_window", "Bengio et al. (2003) fixed-window neural LM at shakespeare_char's budget")
RECIPES.register("shakespeare_char_ngram", "a character 6-gram with interpolated Kneser-Ney (fits in seconds)")
RECIPES.register("shakespeare_speedrun", "time to quality on 2 CPU cores in 10 minutes (Muon, RoPE, QK-norm)")
RECIPES.register("copy_task", "copy a random symbol sequence: a seconds-sized sanity check")
RECIPES.register("multi30k_de_en", "Multi30k German -> English, the original encoder-decoder at a CPU size")
RECIPES.register("pod_llama_350m", "the 336M llama_like model at sequence 2048 in bf16, for TPU/GPU slices (compile)")


def recipe(name: str) -> Config:
    """The config of the packaged recipe ``name`` (an unknown name lists the recipes)."""
    if name not in RECIPES:
        raise ConfigError(_unknown(name))
    return importlib.import_module(f"{__name__}.{name}").get_config()


def base_config(spec: str) -> Config:
    """``--config SPEC`` before ``--set``: the recipe named ``spec``, else the experiment file ``spec``
    (a local file: Python imports it, and it may import its neighbours)."""
    require_local(spec, "--config", "an experiment file is Python imported from its folder")
    if spec in RECIPES and not os.path.isfile(spec):
        return recipe(spec)
    if not os.path.isfile(spec) and not spec.endswith(".py"):
        raise ConfigError(_unknown(spec))
    return experiment_config(spec)


def load_config(spec: str, overrides: list[str] | None = None) -> Config:
    """``--config SPEC --set ...``: `base_config` with the ``overrides`` applied."""
    return configure(base_config(spec), overrides)


def _unknown(spec: str) -> str:
    hint = did_you_mean(spec, RECIPES.names())
    return (
        f"--config {spec}: neither a recipe nor a file{f' ({hint})' if hint else ''}; "
        f"recipes: {', '.join(RECIPES.names())} (or give an experiment file, e.g. experiments/shakespeare_char.py)"
    )
