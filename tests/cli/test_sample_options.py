"""``sample``'s decoding flags build the chosen strategy's settings; a flag it does not read is refused."""

import argparse

import pytest

from transformer_jax.cli import sample
from transformer_jax.core.configlib import ConfigError
from transformer_jax.decode import Greedy, SamplingConfig, TopK, TopP


def _args(strategy: str, **given) -> argparse.Namespace:
    return argparse.Namespace(strategy=strategy, **{o: given.get(o) for o in sample.STRATEGY_OPTIONS})


def test_the_strategies_are_the_decoding_variants_and_beam_search():
    assert (*SamplingConfig.VARIANTS.names(), "beam") == sample.STRATEGIES


def test_the_flags_build_the_chosen_strategy():
    assert sample.strategy_options(_args("greedy")) == {"sampling": Greedy()}
    built = sample.strategy_options(_args("top_k", top_k=5, temperature=0.7))
    assert built == {"sampling": TopK(k=5, temperature=0.7), "seed": 0}
    built = sample.strategy_options(_args("top_k", top_k=5, uniform_top_k=True, seed=3))
    assert built == {"sampling": TopK(k=5, uniform=True), "seed": 3}
    with pytest.raises(ConfigError, match=r"sample.temperature=0.7: has no effect with uniform=True"):
        sample.strategy_options(_args("top_k", temperature=0.7, uniform_top_k=True))
    assert sample.strategy_options(_args("top_p", top_p=0.5)) == {"sampling": TopP(p=0.5), "seed": 0}
    assert sample.strategy_options(_args("beam", alpha=0.0)) == {"beam": 4, "alpha": 0.0}


@pytest.mark.parametrize(
    "strategy,given,message",
    [
        ("greedy", {"top_k": 5}, "--strategy greedy does not read --top-k; it reads none of these"),
        ("sample", {"top_p": 0.5}, "--strategy sample does not read --top-p; it reads --temperature"),
        (
            "top_k",
            {"alpha": 0.5},
            "--strategy top_k does not read --alpha; it reads --temperature, --top-k, --uniform-top-k",
        ),
        (
            "top_p",
            {"uniform_top_k": True},
            "--strategy top_p does not read --uniform-top-k; it reads --temperature, --top-p",
        ),
        ("beam", {"temperature": 0.5}, "--strategy beam does not read --temperature; it reads --beam, --alpha"),
        ("greedy", {"seed": 1}, "--strategy greedy does not read --seed; it reads none of these"),
        ("beam", {"seed": 1}, "--strategy beam does not read --seed; it reads --beam, --alpha"),
        ("sample", {"seed": 1, "top_k": 3}, "--strategy sample does not read --top-k; it reads --temperature, --seed"),
    ],
)
def test_a_flag_the_strategy_does_not_read_is_refused(strategy, given, message):
    with pytest.raises(ConfigError, match=message):
        sample.strategy_options(_args(strategy, **given))


def test_a_bad_value_names_the_setting_and_the_fix():
    hint = r"use Greedy\(\) \(--strategy greedy\)"
    with pytest.raises(ConfigError, match=r"sample.temperature=0.0: must be > 0.0; .* " + hint):
        sample.strategy_options(_args("top_k", temperature=0.0))
