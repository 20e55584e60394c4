"""The packaged recipe ``shakespeare_char_ngram``
(``transformer_jax/recipes/shakespeare_char_ngram.py``, documented there): ``--config
experiments/shakespeare_char_ngram.py`` and ``--config shakespeare_char_ngram`` train the same run.
To make an experiment of your own, copy this file and build on ``get_config()``
(``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char_ngram import get_config

__all__ = ["get_config"]
