"""Parameter counts of the presets, from shapes only (``jax.eval_shape``: nothing allocated)."""

import jax
import numpy as np
from flax import nnx

from transformer_jax.models import abstract_model, count_params, get_preset
from transformer_jax.models.config import with_changes


def test_gpt2_small_has_124439808_params_without_allocating():
    model = abstract_model(get_preset("gpt2_small"))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    assert count_params(model) == 124_439_808


def test_original_base_parameter_count():
    n = count_params(get_preset("original_base"))
    # Embeddings 37000*512 shared three ways; encoder 6 x 3,152,384; decoder 6 x 4,204,032.
    expected = (
        37000 * 512
        + 6 * (4 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 2 * 1024)
        + 6 * (8 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 3 * 1024)
    )
    assert n == expected == 63_082_496
    assert abs(n - 65e6) / 65e6 < 0.04  # the paper's "65M"


def test_llama_like_is_about_340m():
    n = count_params(get_preset("llama_like"))
    assert 3.2e8 < n < 3.6e8, n


def test_scan_and_loop_have_the_same_parameter_count():
    cfg = get_preset("llama_tiny")
    assert count_params(cfg) == count_params(with_changes(cfg, scan_layers=True))
    assert np.isfinite(count_params(cfg))
