"""The compiled cost of one decoding step (`benchmarks.decode.step_costs`): with a KV cache it grows
at most linearly in the position, recomputing the prefix grows one power faster; and the cached step's
FLOPs are those counted from the model's dims, within the elementwise work XLA counts beside the matmuls."""

import numpy as np

from transformer_jax.benchmarks.decode import step_costs
from transformer_jax.models import get_preset

POSITIONS = (16, 64, 256)


def test_recompute_flops_grow_one_power_faster_than_cached_ones():
    cfg = get_preset("nanogpt_char", d_model=32, n_heads=2, d_ff=64, n_layers=2, max_len=300, vocab_size=16)
    costs = step_costs(cfg, POSITIONS)
    flops = {k: np.asarray([costs[k][p]["flops"] for p in POSITIONS]) for k in costs}
    growth = lambda y: np.diff(np.log(y)) / np.diff(np.log(POSITIONS))  # local log-log slopes
    assert np.all(growth(flops["cached"]) > 0) and np.all(growth(flops["cached"]) <= 1.0)
    assert np.all(growth(flops["recompute"]) > 1.0)
    np.testing.assert_allclose(growth(flops["recompute"] / flops["cached"]), 1.0, atol=0.1)
    cached_bytes = [costs["cached"][p]["bytes accessed"] for p in POSITIONS]
    assert np.all(np.diff(cached_bytes) > 0)  # the step reads the cache it is given


def test_cached_step_flops_match_the_count_from_the_models_dims():
    """The count, for nanogpt_char's layout (Pre-LN, learned positions, exact-GELU FFN of two
    matrices, no biases, tied embeddings), 2 flops per multiply-add, one new token over S = p + 1
    cache slots read densely (`step_costs`):

    - per layer: Q, K, V and the output projection, 4 d x d, and the FFN, 2 d x d_ff: 2 (4 d^2 + 2 d d_ff);
    - per layer and slot: q.k and the weighted sum of v, d each summed over the heads: 4 d;
    - the tied output head, d x V: 2 d V (the embedding lookup is a gather: no flops).

    XLA counts elementwise ops too, so the count is a floor and the measure may exceed it by the
    elementwise work: per layer two LayerNorms and two residual adds (d each), the GELU (d_ff) and the
    softmax over H S scores, plus the final LayerNorm and the position add (d each). Here that costs
    5-10 flops an element (the erf polynomial; max, exp, sum and divide of the softmax; LayerNorm's
    moments); a ceiling of 16 leaves room for another XLA's fusions and is still below one more d x d
    matmul (2 d^2 = 131,072 flops here, against 76,000 of slack at p = 16). The cost of one more slot is
    pinned the same way: 4 d L for the two attention matmuls plus at most 16 H L for the softmax."""
    d, heads, d_ff, layers, vocab = 256, 4, 1024, 2, 16  # d large: the elementwise share is ~1/d of the total
    cfg = get_preset(
        "nanogpt_char", d_model=d, n_heads=heads, d_ff=d_ff, n_layers=layers, max_len=300, vocab_size=vocab
    )
    positions = (16, 256)
    costs = step_costs(cfg, positions)
    per_element = 16
    for p in positions:
        slots = p + 1
        matmuls = layers * (2 * (4 * d * d + 2 * d * d_ff) + 4 * d * slots) + 2 * d * vocab
        elementwise = layers * (4 * d + d_ff + heads * slots) + 2 * d
        flops = costs["cached"][p]["flops"]
        assert matmuls <= flops <= matmuls + per_element * elementwise, (p, flops, matmuls)
    per_slot = (costs["cached"][256]["flops"] - costs["cached"][16]["flops"]) / (256 - 16)
    assert 4 * d * layers <= per_slot <= 4 * d * layers + per_element * heads * layers, per_slot
