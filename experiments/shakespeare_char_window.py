"""The packaged recipe ``shakespeare_char_window``
(``transformer_jax/recipes/shakespeare_char_window.py``, documented there): ``--config
experiments/shakespeare_char_window.py`` and ``--config shakespeare_char_window`` train the same
run. To make an experiment of your own, copy this file and build on ``get_config()``
(``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char_window import get_config

__all__ = ["get_config"]
