"""transformer-jax: the Transformer and the ideas that grew out of it, in JAX and Flax NNX.

Layers (imports point downwards only; ``.ci/checks`` enforces it with import-linter):
  cli -> ablation | benchmarks -> train -> eval -> decode -> data | parallel -> models -> nn -> ops -> core.

``import transformer_jax.ops`` needs only jax and numpy; the rest needs flax as well.
"""

__version__ = "0.1.0"
