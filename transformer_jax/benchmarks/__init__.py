"""Benchmarks (``transformer-jax bench ...``): figures and ratios, never pass/fail tests."""
