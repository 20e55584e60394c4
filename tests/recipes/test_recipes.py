"""The packaged recipes: every one is named in ``RECIPES``, loads cleanly, and is the config of its
``experiments/`` file; ``--config`` takes a name or a file alike; an unknown name lists the recipes."""

import os
import pkgutil

import pytest

import transformer_jax.recipes as recipes_pkg
from transformer_jax.core import configlib, unread
from transformer_jax.core.configlib import ConfigError
from transformer_jax.recipes import RECIPES, base_config, load_config, recipe
from transformer_jax.train.experiment import load_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_recipe_module_is_registered_by_its_name():
    modules = {m.name for m in pkgutil.iter_modules(recipes_pkg.__path__)}
    assert modules == set(RECIPES.names())


@pytest.mark.parametrize("name", RECIPES.names())
def test_the_experiment_file_is_the_packaged_recipe(name):
    cfg = recipe(name)
    assert cfg.name == name and unread.unread_fields(cfg) == []
    from_file = load_experiment(os.path.join(ROOT, "experiments", f"{name}.py"))
    assert configlib.to_dict(from_file) == configlib.to_dict(cfg)


def test_config_takes_a_name_or_a_file_with_the_same_overrides():
    sets = ["train.steps=7", "model.dims.n_layers=1"]
    by_name = load_config("shakespeare_char", sets)
    by_file = load_config(os.path.join(ROOT, "experiments", "shakespeare_char.py"), sets)
    assert by_name == by_file and by_name.train.steps == 7 and by_name.model.dims.n_layers == 1


def test_an_unknown_name_lists_the_recipes_and_the_closest():
    with pytest.raises(ConfigError) as err:
        base_config("shakespear_char")
    message = str(err.value)
    assert "--config shakespear_char: neither a recipe nor a file (did you mean 'shakespeare_char'" in message
    assert "recipes: shakespeare_char, " in message and "multi30k_de_en" in message
    with pytest.raises(FileNotFoundError, match="no_such_file.py: no such file"):
        base_config("no_such_file.py")  # a path stays a path: its error names the file
