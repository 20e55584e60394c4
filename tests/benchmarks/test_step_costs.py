"""The compiled cost of one decoding step (`benchmarks.decode.step_costs`): with a KV cache it grows
at most linearly in the position, recomputing the prefix grows one power faster."""

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
