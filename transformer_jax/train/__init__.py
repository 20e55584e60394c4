"""Training: optimizer factory, train step, the loop of periodic actions, Orbax checkpoints, metrics."""
