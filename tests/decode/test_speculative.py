"""Speculative decoding with the MTP modules as the draft gives plain greedy decoding's tokens:
with the model's own drafts, with drafts that are right in a pattern (so steps accept 0..D tokens
and roll the cache back), up to the learned position table's last slot, and stopping at EOS."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.decode import generate
from transformer_jax.decode import speculative as spec
from transformer_jax.decode.cache import rewind
from transformer_jax.models import DecoderLM, ModelConfig, ModelDims, build_model
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.nn.init import InitConfig

MAX_LEN = 24
# init.std 0.5: a sharp random model whose greedy tokens depend on the context, so a stale cache slot
# (a rollback left out) changes them; at 0.02 the tokens barely depend on it and such a bug passes.
CFG = ModelConfig(
    dims=ModelDims(vocab_size=16, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=MAX_LEN),
    mtp=MTPConfig(depth=2),
    init=InitConfig(std=0.5),
)
PROMPT = np.array([[5, 6, 7, 8], [9, 3, 4, 11]], np.int32)


@pytest.fixture(scope="module")
def model():
    return build_model(CFG, seed=3)


def _same(greedy, got):
    np.testing.assert_array_equal(got.tokens, greedy.tokens)
    np.testing.assert_array_equal(got.lengths, greedy.lengths)
    np.testing.assert_array_equal(got.sequences, greedy.sequences)


def test_drafts_right_in_a_pattern_give_greedy_tokens_to_the_last_position(model, monkeypatch):
    new = MAX_LEN - PROMPT.shape[1]  # the learned table's last row is the last token's position
    greedy = generate(model, prompt_BP=PROMPT, max_new_tokens=new)
    truth_BC = jnp.zeros((2, 64), jnp.int32).at[:, :MAX_LEN].set(greedy.sequences)
    real_draft = spec._draft

    def oracle(model, h, seq, caches, p, s, width):
        """The real drafts replaced by greedy's tokens, except at positions divisible by 3 (wrong)."""
        drafts, caches = real_draft(model, h, seq, caches, p, s, width)
        pos_D = p + 1 + jnp.arange(drafts.shape[1])
        right = jax.vmap(lambda row: jax.lax.dynamic_slice_in_dim(row, p + 1, drafts.shape[1]))(truth_BC)
        return jnp.where(pos_D % 3 == 0, (right + 1) % CFG.dims.vocab_size, right), caches

    monkeypatch.setattr(spec, "_draft", oracle)  # traced anew: no other test uses this max_new_tokens
    got = spec.speculative_generate(model, prompt_BP=PROMPT, max_new_tokens=new)
    _same(greedy, got)
    steps, accepted = int(got.steps), int(got.accepted)
    assert 0 < accepted < 2 * steps and steps < new - 1  # some steps accepted drafts, some rolled back


def test_own_drafts_give_greedy_tokens_and_stop_at_eos(model):
    eos = int(generate(model, prompt_BP=PROMPT, max_new_tokens=4).tokens[1, 3])  # row 1 stops by its 4th token
    with_eos = generate(model, prompt_BP=PROMPT, max_new_tokens=12, eos_id=eos)
    assert int(with_eos.lengths[1]) <= 4
    _same(with_eos, spec.speculative_generate(model, prompt_BP=PROMPT, max_new_tokens=12, eos_id=eos))


def test_a_model_without_mtp_is_refused_and_rewind_only_moves_the_index():
    with pytest.raises(ValueError, match="has none.*model.mtp=on"):
        spec.speculative_generate(build_model(dataclasses.replace(CFG, mtp=None)), prompt_BP=PROMPT, max_new_tokens=2)
    cache = DecoderLM(CFG, rngs=nnx.Rngs(0)).init_cache(2, 8)
    moved = rewind(cache, 5)
    assert [int(c["self"].index) for c in moved] == [5, 5]
    assert moved[0]["self"].k_BKDS is cache[0]["self"].k_BKDS  # no copy of keys/values


def test_cli_sets_mtp_and_bench_decode_speculative_refuses_what_it_cannot_measure(tmp_path):
    from tests.cli_helpers import TINY
    from transformer_jax.benchmarks.speculative import bench_speculative
    from transformer_jax.cli import build_parser
    from transformer_jax.cli.bench import run
    from transformer_jax.core.configlib import ConfigError
    from transformer_jax.train.experiment import load_experiment

    args = build_parser().parse_args(["train", "--config", TINY, "--workdir", "w", "--set", "model.mtp=on",
                                      "--set", "model.mtp.depth=2"])  # fmt: skip
    cfg = load_experiment(TINY, args.set)
    assert cfg.model.mtp == MTPConfig(depth=2)
    with pytest.raises(ConfigError, match="reads --workdir only with --speculative"):
        run(build_parser().parse_args(["bench", "decode", "--workdir", str(tmp_path)]))
    with pytest.raises(ConfigError, match="does not read --speculative"):
        run(build_parser().parse_args(["bench", "train", "--speculative"]))
    with pytest.raises(ConfigError, match="needs a model with MTP modules"):
        bench_speculative(types.SimpleNamespace(model=dataclasses.replace(CFG, mtp=None)))
