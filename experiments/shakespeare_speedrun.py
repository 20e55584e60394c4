"""The packaged recipe ``shakespeare_speedrun`` (``transformer_jax/recipes/shakespeare_speedrun.py``,
documented there): ``--config experiments/shakespeare_speedrun.py`` and ``--config
shakespeare_speedrun`` train the same run. To make an experiment of your own, copy this file and
build on ``get_config()`` (``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_speedrun import get_config

__all__ = ["get_config"]
