"""Small model-building helpers shared by the model tests."""

from typing import cast

import jax
import jax.numpy as jnp
from flax import nnx

from transformer_jax.models import build_model, get_preset
from transformer_jax.models.config import with_changes
from transformer_jax.models.decoder_lm import DecoderLM
from transformer_jax.models.encoder_decoder import EncoderDecoder


def tiny(preset: str, **overrides):
    return get_preset(preset, **overrides)


def scanned_copy(model, **overrides):
    """The same weights in a ``scan_layers=True`` model (stacks per-layer parameters)."""
    cfg = with_changes(model.cfg, scan_layers=True, **overrides)
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


def per_layer_flat(state) -> dict:
    """{path: array} of a (parameter or gradient) State, with a scanned stack's stacked ``layers``
    axis split into the loop model's per-layer paths (``(..., "layers", k, ...)``), the inverse of
    ``scanned_copy``'s stacking: a scanned model's and a loop model's entries then pair up by path.
    A loop model's State comes back unchanged (flattened)."""
    out = {}
    for path, var in nnx.to_flat_state(state):
        x = var[...]
        stacked = path[0] in ("layers", "encoder", "decoder") and path[1] == "layers" and not isinstance(path[2], int)
        if stacked:
            for k in range(x.shape[0]):
                out[path[:2] + (k,) + path[2:]] = x[k]
        else:
            out[path] = x
    return out


def build_lm(cfg, **kw) -> DecoderLM:
    """``build_model`` for a ``decoder_lm`` config, typed as such."""
    assert cfg.kind == "decoder_lm", cfg.kind
    return cast(DecoderLM, build_model(cfg, **kw))


def build_seq2seq(cfg, **kw) -> EncoderDecoder:
    """``build_model`` for an ``encoder_decoder`` config, typed as such."""
    assert cfg.kind == "encoder_decoder", cfg.kind
    return cast(EncoderDecoder, build_model(cfg, **kw))
