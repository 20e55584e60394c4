"""The packaged recipe ``shakespeare_char`` (``transformer_jax/recipes/shakespeare_char.py``,
documented there): ``--config experiments/shakespeare_char.py`` and ``--config shakespeare_char``
train the same run. To make an experiment of your own, copy this file and build on ``get_config()``
(``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char import get_config

__all__ = ["get_config"]
