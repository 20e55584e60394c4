"""RoPE settings of Hugging Face configs read as transformers reads them (``models/hf/rope.py``),
and what it would read differently from us refused by name. The config dicts are transformers' own
(``AutoConfig.for_model(...).to_dict()``); the logits behind these mappings are compared in
test_hf_families.py. Needs the ``interop`` extra."""

from __future__ import annotations

import copy
import dataclasses

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from tests.models.test_hf_families import CASES, MODEL_TYPE  # noqa: E402
from transformer_jax.models import YarnScaling  # noqa: E402
from transformer_jax.models.hf import config_from_hf, config_to_hf  # noqa: E402

pytestmark = pytest.mark.interop

YARN = {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "original_max_position_embeddings": 16}


def _hf(case: str, **change) -> dict:
    d = transformers.AutoConfig.for_model(MODEL_TYPE.get(case, case), **CASES[case]).to_dict()
    return {k: v for k, v in {**d, **change}.items() if v is not None}


def test_what_transformers_fills_in_is_filled_in_the_same():
    """Llama 3's missing original length is max_position_embeddings; a top-level rope_theta equal to
    the dict's is accepted."""
    llama3 = {k: v for k, v in CASES["llama3"]["rope_parameters"].items() if k != "original_max_position_embeddings"}
    cfg = config_from_hf(_hf("llama3", rope_parameters=llama3))
    assert cfg.position.scaling.original_max_len == CASES["llama3"]["max_position_embeddings"]
    assert config_from_hf(_hf("llama", rope_theta=500.0)).position.theta == 500.0


ROPE_CASES = [c for c in CASES if "rope_parameters" in _hf(c)]


@pytest.mark.parametrize("case", ROPE_CASES)
def test_a_config_stating_no_base_gets_the_base_transformers_gives_it(case):
    """Mixtral's and Gemma 3's global layers' default is 1e6 in transformers, the others' 1e4."""
    d = {k: v for k, v in _hf(case).items() if k not in ("rope_theta", "rope_local_base_freq")}
    nested = "full_attention" in d["rope_parameters"]
    drop = lambda p: {k: v for k, v in p.items() if k != "rope_theta"}
    d["rope_parameters"] = (
        {k: drop(v) for k, v in d["rope_parameters"].items()} if nested else drop(d["rope_parameters"])
    )
    kw = copy.deepcopy({k: v for k, v in d.items() if k != "model_type"})  # transformers fills its dicts in
    theirs = transformers.AutoConfig.for_model(MODEL_TYPE.get(case, case), **kw).rope_parameters
    ours = config_from_hf(d).position
    assert ours.theta == (theirs["full_attention"] if nested else theirs)["rope_theta"]
    assert ours.theta == (1e6 if case in ("mixtral", "gemma3_text") else 1e4)
    if nested:
        assert ours.local_theta == theirs["sliding_attention"]["rope_theta"] == 1e4


def test_gemma3s_sliding_base_is_read_where_transformers_reads_it():
    local = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default"},
    }
    assert (
        config_from_hf(_hf("gemma3_text", rope_parameters=local, rope_local_base_freq=500.0)).position.local_theta
        == 500.0
    )
    full_only = config_from_hf(_hf("gemma3_text", rope_parameters={"sliding_attention": None}, rope_theta=None))
    assert (full_only.position.theta, full_only.position.local_theta) == (1e6, 1e4)  # transformers fills both in
    stated = {**local, "sliding_attention": {"rope_type": "default", "rope_theta": 400.0}}
    refused = (
        r"'rope_local_base_freq'=500.0 is not supported: differs from the rope_theta=400.0 in rope_parameters\['slid"
    )
    with pytest.raises(ValueError, match=refused):
        config_from_hf(_hf("gemma3_text", rope_parameters=stated, rope_local_base_freq=500.0))


def test_legacy_rope_scaling_reads_like_rope_parameters():
    legacy = {"type": "yarn", **{k: v for k, v in YARN.items() if k not in ("rope_type", "rope_theta")}}
    old = config_from_hf(_hf("llama", rope_parameters=None, rope_scaling=legacy, rope_theta=500.0))
    assert old.position == config_from_hf(_hf("llama", rope_parameters=YARN)).position
    assert old.position.scaling == YarnScaling(factor=4.0, original_max_len=16)


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        ("llama", dict(rope_scaling={"type": "linear", "factor": 2.0}),
         "'rope_scaling'={'type': 'linear', 'factor': 2.0} is not supported: the config also has rope_parameters"),
        ("llama", dict(rope_parameters=None, rope_scaling={"type": "linear", "factor": 2.0, "mscale_all_dim": 1.0}),
         "'rope_scaling'={'type': 'linear', 'factor': 2.0, 'mscale_all_dim': 1.0} is not supported: 'linear' RoPE "
         "keys ['mscale_all_dim'] have no mapping"),
        ("llama", dict(rope_parameters={k: v for k, v in YARN.items() if k != "factor"}), "YaRN needs 'factor'"),
        ("llama", dict(rope_parameters={**YARN, "mscale": 0.7}), "model.position.scaling.mscale=0.7"),
        ("llama", dict(rope_parameters={**YARN, "mscale_all_dim": 0.7}), "model.position.scaling.mscale_all_dim=0.7"),
        ("llama", dict(rope_parameters={**YARN, "mscale": 0.7, "mscale_all_dim": 1.0, "attention_factor": 0.9}),
         "model.position.scaling.mscale=0.7"),
        ("gemma3_text", dict(rope_parameters={
            "full_attention": {**YARN, "truncate": False}, "sliding_attention": {"rope_type": "default"}}),
         "transformers reads YaRN's 'truncate' beside them, not in them"),
        ("gemma3_text", dict(rope_parameters={
            "full_attention": YARN, "sliding_attention": {"rope_type": "default"}, "truncate": False}),
         "transformers reads YaRN's 'truncate' beside them, not in them"),
        ("gemma3_text", dict(rope_parameters=YARN), "Gemma 3 reads one RoPE dict per layer type"),
        ("llama", dict(rope_parameters=YARN, rope_theta=10000.0),
         "'rope_theta'=10000.0 is not supported: differs from the rope_theta=500.0 in rope_parameters"),
        ("llama3", dict(rope_parameters={k: v for k, v in CASES["llama3"]["rope_parameters"].items()
                                         if k != "low_freq_factor"}),
         "'llama3' RoPE needs ['low_freq_factor'] (transformers requires them)"),
    ],
)  # fmt: skip
def test_what_transformers_would_read_otherwise_is_refused_by_name(case, change, message):
    with pytest.raises(ValueError) as err:
        config_from_hf(_hf(case, **change))
    assert message in str(err.value)


def test_yarn_magnitudes_are_kept_where_read_and_written_back():
    """mscale with mscale_all_dim (their ratio scales cos/sin) loads on any RoPE family; an
    unrounded ramp cannot be written as Gemma 3, which keeps one RoPE dict per layer type."""
    both = config_from_hf(_hf("llama", rope_parameters={**YARN, "mscale": 0.7, "mscale_all_dim": 1.0}))
    assert both.position.scaling == YarnScaling(factor=4.0, original_max_len=16, mscale=0.7, mscale_all_dim=1.0)
    assert config_to_hf(both)[1]["rope_parameters"] == {**YARN, "beta_fast": 32.0, "beta_slow": 1.0,
                                                        "mscale": 0.7, "mscale_all_dim": 1.0}  # fmt: skip
    gemma = config_from_hf(_hf("gemma3_text"))
    unrounded = YarnScaling(factor=4.0, original_max_len=16, truncate=False)
    cfg = dataclasses.replace(gemma, position=dataclasses.replace(gemma.position, scaling=unrounded))
    with pytest.raises(ValueError, match="Gemma 3 splits by layer type"):
        config_to_hf(cfg, family="gemma3_text")


def test_a_v2_router_over_all_its_groups_is_written_group_limited():
    groups = dict(topk_method="group_limited_greedy", n_group=4, topk_group=4)
    cfg = config_from_hf(_hf("deepseek_v2", **groups))
    assert cfg.moe is not None and cfg.moe.router.groups is not None
    family, hf = config_to_hf(cfg)
    assert (family.name, hf["topk_method"], hf["n_group"], hf["topk_group"]) == ("deepseek_v2", *groups.values())
