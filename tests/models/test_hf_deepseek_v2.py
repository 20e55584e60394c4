"""DeepSeek-V2 beyond the parity tests of test_hf_families.py (logits, greedy generation with the
cache, round trip, for the group-limited and the greedy router): its config mapping (softmax
routing, groups by their best score, no renormalisation, the shared experts; V2-Lite's published
config), every setting we cannot represent refused naming its key, and a model that only V3 can
express written as V3. Needs the ``interop`` extra."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.models.test_hf_families import hf_model  # noqa: E402
from transformer_jax.models import RopePositions, YarnScaling, get_preset  # noqa: E402
from transformer_jax.models.hf import config_from_hf, config_to_hf  # noqa: E402
from transformer_jax.nn.moe_config import ExpertGroupsConfig  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The config.json dict transformers writes for the tiny group-limited model."""
    path = tmp_path_factory.mktemp("deepseek_v2")
    hf_model("deepseek_v2").save_pretrained(path)
    return json.loads((path / "config.json").read_text())


def test_config_maps_mla_and_softmax_group_routing(saved):
    cfg = config_from_hf(saved)
    assert cfg.mla is not None and cfg.moe is not None
    assert (cfg.mla.q_lora_rank, cfg.mla.kv_lora_rank, cfg.mla.qk_rope_head_dim) == (None, 16, 8)
    assert cfg.position == RopePositions(pairing="adjacent") and cfg.use_bias is False
    moe, router = cfg.moe, cfg.moe.router
    assert (moe.n_experts, moe.top_k, moe.n_shared, moe.first_dense, moe.d_expert) == (10, 4, 2, 1, 32)
    assert (router.kind, router.renormalize, router.scaling_factor) == ("softmax_topk", False, 2.5)
    assert router.groups == ExpertGroupsConfig(n_groups=4, topk_groups=2, score="max")
    assert config_to_hf(cfg)[0].name == "deepseek_v2"


def test_published_v2_lite_config_loads():
    """DeepSeek-V2-Lite's config.json as published (remote-code keys, YaRN in ``rope_scaling``),
    at its real sizes (only the config is read)."""
    lite = dict(
        model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"], auto_map={"AutoConfig": "x.Config"},
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2,
        n_routed_experts=64, ep_size=1, routed_scaling_factor=1.0, kv_lora_rank=512, q_lora_rank=None,
        qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, topk_method="greedy", n_group=1, topk_group=1,
        num_experts_per_tok=6, moe_layer_freq=1, first_k_dense_replace=1, norm_topk_prob=False,
        scoring_func="softmax", aux_loss_alpha=0.001, seq_aux=True, hidden_act="silu",
        max_position_embeddings=163840, initializer_range=0.02, rms_norm_eps=1e-6, use_cache=True,
        pad_token_id=None, bos_token_id=100000, eos_token_id=100001, pretraining_tp=1, tie_word_embeddings=False,
        rope_theta=10000, attention_bias=False, attention_dropout=0.0,
        rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                      "original_max_position_embeddings": 4096, "type": "yarn"},
    )  # fmt: skip
    cfg = config_from_hf(lite)
    assert cfg.moe is not None and (cfg.moe.n_routed, cfg.moe.routed_k, cfg.moe.router.groups) == (64, 6, None)
    assert cfg.position.scaling == YarnScaling(factor=40.0, original_max_len=4096, mscale=0.707, mscale_all_dim=0.707)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(norm_topk_prob=True), "'norm_topk_prob'=True is not supported (transformers' DeepseekV2 never"),
        (dict(mlp_bias=True), "'mlp_bias'=True is not supported"),
        (dict(attention_bias=True), "'attention_bias'=True is not supported"),
        (dict(topk_method="noaux_tc"), "'topk_method'='noaux_tc' is not supported"),
        (dict(scoring_func="sigmoid"), "'scoring_func'='sigmoid' is not supported"),
        (dict(moe_layer_freq=2), "'moe_layer_freq'=2 is not supported"),
        (dict(rope_interleave=False), "rope_interleave=False"),
        (dict(n_group=None), "'n_group' is missing"),
    ],
)
def test_what_deepseek_v2_configs_cannot_express_is_refused_by_name(saved, change, message):
    hf = {k: v for k, v in {**saved, **change}.items() if v is not None}
    with pytest.raises(ValueError) as err:
        config_from_hf(hf)
    assert message in str(err.value)


def test_a_sigmoid_routed_model_is_written_as_v3_not_v2():
    family, hf = config_to_hf(get_preset("deepseek_v3_tiny"))
    assert family.name == "deepseek_v3" and hf["scoring_func"] == "sigmoid"
