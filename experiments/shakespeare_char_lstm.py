"""The packaged recipe ``shakespeare_char_lstm`` (``transformer_jax/recipes/shakespeare_char_lstm.py``,
documented there): ``--config experiments/shakespeare_char_lstm.py`` and ``--config
shakespeare_char_lstm`` train the same run. To make an experiment of your own, copy this file and
build on ``get_config()`` (``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char_lstm import get_config

__all__ = ["get_config"]
