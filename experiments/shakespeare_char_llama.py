"""The packaged recipe ``shakespeare_char_llama``
(``transformer_jax/recipes/shakespeare_char_llama.py``, documented there): ``--config
experiments/shakespeare_char_llama.py`` and ``--config shakespeare_char_llama`` train the same run.
To make an experiment of your own, copy this file and build on ``get_config()``
(``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char_llama import get_config

__all__ = ["get_config"]
