"""Selection rules: degenerate settings equal greedy; samples follow the intended distributions."""

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from tests.variant_reads import unread_fields
from transformer_jax.core.configlib import ConfigError, from_dict
from transformer_jax.decode import Greedy, Sample, SamplingConfig, TopK, TopP, generate, pick
from transformer_jax.eval.translation import Sampled
from transformer_jax.models import build_model, get_preset

LOGITS = np.log(np.array([0.30, 0.22, 0.15, 0.12, 0.09, 0.07, 0.05], np.float32))
N_DRAWS = 20000


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _expected(cfg: SamplingConfig) -> np.ndarray:
    """The distribution each rule should sample from, written out with numpy."""
    assert isinstance(cfg, Sample | TopK | TopP)
    p = _softmax(LOGITS.astype(np.float64) / cfg.temperature)
    order = np.argsort(-p)
    keep = np.zeros_like(p, bool)
    if isinstance(cfg, TopK):
        keep[order[: cfg.k]] = True
        if cfg.uniform:
            return keep / keep.sum()
    elif isinstance(cfg, TopP):
        cum = np.cumsum(p[order])
        keep[order[: int(np.searchsorted(cum, cfg.p)) + 1]] = True
    else:
        keep[:] = True
    q = np.where(keep, p, 0.0)
    return q / q.sum()


CASES = {
    "temperature_1": Sample(),
    "temperature_0.5": Sample(temperature=0.5),
    "temperature_2": Sample(temperature=2.0),
    "top_k_3": TopK(k=3),
    "top_k_3_uniform": TopK(k=3, uniform=True),
    "top_k_4_t0.7": TopK(k=4, temperature=0.7),
    "top_p_0.6": TopP(p=0.6),
    "top_p_0.8_t1.5": TopP(p=0.8, temperature=1.5),
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
    draws = np.asarray(pick(logits, jax.random.key(1234), Sample()))
    counts = np.bincount(draws, minlength=LOGITS.size)
    assert stats.chisquare(counts, N_DRAWS * _expected(Sample(temperature=0.5))).pvalue < 1e-6


@pytest.mark.parametrize(
    "cfg",
    [
        TopK(k=1),
        TopP(p=1e-6),
        TopK(k=1, uniform=True),
        TopP(p=1e-6, temperature=3.0),
    ],
    ids=str,
)
def test_degenerate_settings_equal_greedy(cfg):
    logits = jax.random.normal(jax.random.key(0), (64, 50))
    greedy = pick(logits, None, Greedy())
    for seed in range(3):
        np.testing.assert_array_equal(pick(logits, jax.random.key(seed), cfg), greedy)


def test_deterministic_for_a_key():
    logits = jax.random.normal(jax.random.key(0), (16, 50))
    cfg = TopP(p=0.9)
    a, b = pick(logits, jax.random.key(7), cfg), pick(logits, jax.random.key(7), cfg)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, pick(logits, jax.random.key(8), cfg))


@pytest.mark.parametrize(
    "cls,field,value",
    [(Sample, "temperature", 0.0), (TopK, "temperature", -1.0), (TopK, "k", 0), (TopP, "p", 0.0), (TopP, "p", 1.5)],
)
def test_bad_config_names_the_field(cls, field, value):
    with pytest.raises(ConfigError, match=f"sample.{field}"):
        cls(**{field: value})


@pytest.mark.parametrize(
    "cls,field",
    [(Greedy, "temperature"), (Sample, "k"), (Sample, "p"), (TopK, "p"), (TopP, "k"), (TopP, "uniform")],
)
def test_a_setting_the_strategy_does_not_read_is_refused(cls, field):
    """Greedy has no temperature, top-k no p: the settings exist only where they are read."""
    with pytest.raises(TypeError, match=field):
        cls(**{field: 1})


@pytest.mark.parametrize("name", SamplingConfig.VARIANTS.names())
def test_every_strategy_reads_all_its_settings(name):
    """``pick`` (and a jitted `decode.generate` with a tiny model) read every field of each strategy."""
    cfg = SamplingConfig.VARIANTS.get(name)()
    logits = jax.random.normal(jax.random.key(0), (4, 11))
    assert unread_fields(lambda: pick(logits, jax.random.key(1), cfg), cfg) == []
    model = build_model(get_preset("gpt2_tiny", vocab_size=11, n_layers=1, dropout=0.0))

    def decode():
        out = generate(
            model, prompt_BP=np.ones((2, 3), np.int32), max_new_tokens=2, key=jax.random.key(2), sampling=cfg
        )
        assert out.tokens.shape == (2, 2)

    assert unread_fields(decode, cfg) == []


def test_a_strategy_is_chosen_by_name():
    assert from_dict(Sampled, {"sampling": {"kind": "top_p", "p": 0.5}}).sampling == TopP(p=0.5)
    assert Sampled(sampling=cast(Any, "top_k")).sampling == TopK()
    with pytest.raises(
        ConfigError,
        match=r"translate.search.sampling=.nucleus.: unknown decoding strategy; choose one of: greedy, sample, top_k",
    ):
        Sampled(sampling=cast(Any, "nucleus"))
