"""Token-weighted perplexity: padding excluded, equal to a numpy computation from the logits."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer_jax.eval import perplexity
from transformer_jax.models import build_model, get_preset


def _batch(rng, B=3, T=8, vocab=50):
    inputs = rng.integers(4, vocab, (B, T)).astype(np.int32)
    targets = rng.integers(4, vocab, (B, T)).astype(np.int32)
    weights = np.ones((B, T), np.float32)
    weights[1, 5:] = 0.0  # padding
    weights[2, 2:] = 0.0
    seg = (weights > 0).astype(np.int32)
    pos = np.tile(np.arange(T, dtype=np.int32), (B, 1))
    return dict(inputs=inputs, targets=targets, weights=weights, segment_ids=seg, positions=pos)


def test_perplexity_is_token_weighted_and_skips_padding():
    model = build_model(get_preset("gpt2_tiny", n_layers=1))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(0)
    batches = [_batch(rng), _batch(rng)]
    got = perplexity(graphdef, nnx.to_pure_dict(params), nnx.to_pure_dict(rest), batches, "lm")
    nll = n = 0.0
    for b in batches:
        logits, _ = model(
            jnp.asarray(b["inputs"]),
            positions_BT=jnp.asarray(b["positions"]),
            segment_ids_BT=jnp.asarray(b["segment_ids"]),
        )
        logp = np.asarray(jax.nn.log_softmax(logits, -1))
        tok = np.take_along_axis(logp, b["targets"][..., None], -1)[..., 0]
        nll -= float((tok * b["weights"]).sum())
        n += float(b["weights"].sum())
    assert got["tokens"] == n == 2 * (24 - 3 - 6)
    np.testing.assert_allclose(got["loss"], nll / n, rtol=1e-5)
    np.testing.assert_allclose(got["perplexity"], np.exp(nll / n), rtol=1e-5)
