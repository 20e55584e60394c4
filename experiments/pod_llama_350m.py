"""The packaged recipe ``pod_llama_350m`` (``transformer_jax/recipes/pod_llama_350m.py``, documented
there): ``--config experiments/pod_llama_350m.py`` and ``--config pod_llama_350m`` are the same run.
Plan it for a slice before renting one: ``transformer-jax compile --config pod_llama_350m --target
v5p-8 --set mesh.fsdp=4 train.batch_size=8``."""

from transformer_jax.recipes.pod_llama_350m import get_config

__all__ = ["get_config"]
