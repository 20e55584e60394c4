"""The packaged recipe ``multi30k_de_en`` (``transformer_jax/recipes/multi30k_de_en.py``, documented
there): ``--config experiments/multi30k_de_en.py`` and ``--config multi30k_de_en`` train the same
run. To make an experiment of your own, copy this file and build on ``get_config()``
(``dataclasses.replace``)."""

from transformer_jax.recipes.multi30k_de_en import get_config

__all__ = ["get_config"]
