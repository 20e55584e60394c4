"""The position-encoding checks of ``ablation.positions`` against functions whose answer is known,
a model's own outputs permuted by hand, and RoPE rotations written here in numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ablation import positions
from transformer_jax.models import ModelConfig, ModelDims, SoftmaxAttention, build_model
from transformer_jax.nn.init import InitConfig

TOKENS = jnp.array([[1.0, 2.0, 4.0], [3.0, 0.0, -2.0]])
PERM = np.array([2, 0, 1])


def test_an_elementwise_function_has_no_gap_and_a_prefix_sum_has_the_gap_worked_out_here():
    assert positions.permutation_gap(lambda x: 3.0 * x**2, TOKENS, PERM) == 0.0
    # cumsum of x[:, P] = [[4, 5, 7], [-2, 1, 1]]; cumsum(x)[:, P] = [[7, 1, 3], [1, 3, 3]]: the largest
    # difference 4 over the largest |cumsum(x)| 7
    assert positions.permutation_gap(lambda x: jnp.cumsum(x, axis=1), TOKENS, PERM) == pytest.approx(4 / 7)


def model_cfg(position: str) -> ModelConfig:
    return ModelConfig(
        dims=ModelDims(vocab_size=13, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=8),
        position=position,
        attention=SoftmaxAttention(causal=False),
        init=InitConfig(std=0.5),
    )


@pytest.mark.parametrize("position", ["none", "learned"])
def test_a_seeded_gap_is_that_of_the_models_own_logits_permuted_by_hand(position):
    seed, cfg = 3, model_cfg(position)
    logits = lambda t: np.asarray(build_model(cfg, seed=seed)(t)[0], np.float64)
    tokens = jax.random.randint(jax.random.key(seed), (2, 8), 0, 13)
    perm = np.random.default_rng(seed).permutation(8)
    want = np.max(np.abs(logits(tokens[:, perm]) - logits(tokens)[:, perm])) / np.max(np.abs(logits(tokens)))
    got = positions.seeded_permutation_gap(cfg, seed, 8)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert (got < 1e-4) == (position == "none")


def numpy_rope(x_D: np.ndarray, m: int, theta: float = 10000.0) -> np.ndarray:
    """x rotated by position m, pairs (x[i], x[i + D/2]) turned by m * theta^(-2i/D), in float64."""
    half = len(x_D) // 2
    angle = m * theta ** (-2.0 * np.arange(half) / len(x_D))
    a, b = x_D[:half], x_D[half:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)])


def test_rope_scores_are_the_dot_products_of_vectors_rotated_here():
    q, k = np.random.default_rng(0).normal(size=(2, 8))
    scores = positions.rope_scores(q.astype(np.float32), k.astype(np.float32), 10)
    want = np.array([[numpy_rope(q, m) @ numpy_rope(k, n) for n in range(10)] for m in range(10)])
    assert scores.shape == (10, 10)
    np.testing.assert_allclose(scores, want, atol=1e-4)
    assert positions.diagonal_spread(scores) < 1e-5


def test_diagonal_spread_is_the_largest_range_along_a_diagonal_over_the_std():
    toeplitz = np.array([[abs(m - n) for n in range(4)] for m in range(4)], float)  # a function of |m - n|
    assert positions.diagonal_spread(toeplitz) == 0.0
    bumped = toeplitz.copy()
    bumped[2, 0] += 0.5  # the diagonal m - n = 2 now holds 2.5 and 2
    assert positions.diagonal_spread(bumped) == pytest.approx(0.5 / np.std(bumped))


def test_the_figures_draw_the_diagonal_means_and_each_arms_mean_over_seeds():
    import matplotlib

    matplotlib.use("Agg")
    scores = np.arange(9.0).reshape(3, 3)
    offsets, means = positions.rope_figure(scores).axes[1].lines[0].get_data()
    np.testing.assert_array_equal(offsets, [-2, -1, 0, 1, 2])
    np.testing.assert_allclose(means, [2.0, 3.0, 4.0, 5.0, 6.0])  # [m, n] = 3m + n, offset m - n = -o
    curve = type("C", (), {"steps": [0, 1], "train_loss": [3.0, 2.0]})
    losses = {"a": {64: [1.0, 2.0], 256: [3.0, 4.0]}, "b": {64: [1.0, 1.0], 256: [1.0, 1.0]}}
    fig = positions.length_figure({"a s0": curve, "b s0": curve}, losses, (64, 256), 64, 0)
    assert [line.get_label() for line in fig.axes[1].lines] == ["a", "b"]
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [1.5, 3.5])
