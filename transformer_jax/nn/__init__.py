"""Thin flax.nnx modules that own parameters (with logical axis names) and call ``transformer_jax.ops``."""
