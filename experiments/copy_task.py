"""The packaged recipe ``copy_task`` (``transformer_jax/recipes/copy_task.py``, documented there):
``--config experiments/copy_task.py`` and ``--config copy_task`` train the same run. To make an
experiment of your own, copy this file and build on ``get_config()`` (``dataclasses.replace``)."""

from transformer_jax.recipes.copy_task import get_config

__all__ = ["get_config"]
