"""Selection rules: degenerate settings equal greedy; samples follow the intended distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from transformer_jax.decode import SamplingConfig, pick

LOGITS = np.log(np.array([0.30, 0.22, 0.15, 0.12, 0.09, 0.07, 0.05], np.float32))
N_DRAWS = 20000


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _expected(cfg: SamplingConfig) -> np.ndarray:
    """The distribution each rule should sample from, written out with numpy."""
    p = _softmax(LOGITS.astype(np.float64) / cfg.temperature)
    order = np.argsort(-p)
    keep = np.zeros_like(p, bool)
    if cfg.strategy == "top_k":
        keep[order[: cfg.top_k]] = True
        if cfg.uniform_top_k:
            return keep / keep.sum()
    elif cfg.strategy == "top_p":
        cum = np.cumsum(p[order])
        keep[order[: int(np.searchsorted(cum, cfg.top_p)) + 1]] = True
    else:
        keep[:] = True
    q = np.where(keep, p, 0.0)
    return q / q.sum()


CASES = {
    "temperature_1": SamplingConfig("sample"),
    "temperature_0.5": SamplingConfig("sample", temperature=0.5),
    "temperature_2": SamplingConfig("sample", temperature=2.0),
    "top_k_3": SamplingConfig("top_k", top_k=3),
    "top_k_3_uniform": SamplingConfig("top_k", top_k=3, uniform_top_k=True),
    "top_k_4_t0.7": SamplingConfig("top_k", top_k=4, temperature=0.7),
    "top_p_0.6": SamplingConfig("top_p", top_p=0.6),
    "top_p_0.8_t1.5": SamplingConfig("top_p", top_p=0.8, temperature=1.5),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_follow_expected_distribution(name):
    cfg = CASES[name]
    logits = jnp.tile(jnp.asarray(LOGITS), (N_DRAWS, 1))  # one independent draw per row
    draws = np.asarray(jax.jit(pick, static_argnums=2)(logits, jax.random.key(1234), cfg))
    counts = np.bincount(draws, minlength=LOGITS.size)
    expected = _expected(cfg)
    support = expected > 0
    assert counts[~support].sum() == 0, f"{name}: sampled outside the support {np.flatnonzero(support)}"
    result = stats.chisquare(counts[support], N_DRAWS * expected[support])
    assert result.pvalue > 1e-3, (name, counts, N_DRAWS * expected, result)


def test_chi_square_detects_a_wrong_distribution():
    """The test has power: temperature-1 samples are rejected against the temperature-0.5 law."""
    logits = jnp.tile(jnp.asarray(LOGITS), (N_DRAWS, 1))
    draws = np.asarray(pick(logits, jax.random.key(1234), SamplingConfig("sample")))
    counts = np.bincount(draws, minlength=LOGITS.size)
    assert stats.chisquare(counts, N_DRAWS * _expected(SamplingConfig("sample", temperature=0.5))).pvalue < 1e-6


@pytest.mark.parametrize(
    "cfg",
    [
        SamplingConfig("top_k", top_k=1),
        SamplingConfig("top_p", top_p=1e-6),
        SamplingConfig("top_k", top_k=1, uniform_top_k=True),
        SamplingConfig("top_p", top_p=1e-6, temperature=3.0),
    ],
    ids=str,
)
def test_degenerate_settings_equal_greedy(cfg):
    logits = jax.random.normal(jax.random.key(0), (64, 50))
    greedy = pick(logits, None, SamplingConfig("greedy"))
    for seed in range(3):
        np.testing.assert_array_equal(pick(logits, jax.random.key(seed), cfg), greedy)


def test_deterministic_for_a_key():
    logits = jax.random.normal(jax.random.key(0), (16, 50))
    cfg = SamplingConfig("top_p", top_p=0.9)
    a, b = pick(logits, jax.random.key(7), cfg), pick(logits, jax.random.key(7), cfg)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, pick(logits, jax.random.key(8), cfg))


@pytest.mark.parametrize(
    "field,value", [("temperature", 0.0), ("top_k", 0), ("top_p", 0.0), ("top_p", 1.5), ("strategy", "nucleus")]
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(Exception, match=f"sample.{field}"):
        SamplingConfig(**{field: value})
