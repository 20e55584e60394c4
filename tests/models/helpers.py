"""Small model-building helpers shared by the model tests."""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from transformer_jax.models import build_model, get_preset


def tiny(preset: str, **overrides):
    return get_preset(preset, **overrides)


def scanned_copy(model, **overrides):
    """The same weights in a ``scan_layers=True`` model (stacks per-layer parameters)."""
    cfg = dataclasses.replace(model.cfg, scan_layers=True, **overrides)
    scanned = build_model(cfg, seed=1)
    src = nnx.state(model, nnx.Param)
    dst = nnx.state(scanned, nnx.Param)
    flat_src = dict(nnx.to_flat_state(src))
    new = {}
    for path, var in nnx.to_flat_state(dst):
        if path[0] in ("layers", "encoder", "decoder") and path[1] == "layers":
            i = 2
            per_layer = [flat_src[path[:i] + (k,) + path[i:]][...] for k in range(var.shape[0])]
            new[path] = jnp.stack(per_layer)
        else:
            new[path] = flat_src[path][...]
    for path, var in nnx.to_flat_state(dst):
        var[...] = new[path]
    nnx.update(scanned, dst)
    return scanned


def random_tokens(key, shape, vocab):
    return jax.random.randint(key, shape, 1, vocab)
