"""DeepSeek-V3 beyond the parity tests of test_hf_families.py: its config mapping (MLA sizes, the
dense first layers, shared and routed experts, group-limited sigmoid routing with the bias and
``routed_scaling_factor``), every setting we cannot represent refused naming its key, a bfloat16
checkpoint (logits of the upcast weights, bit-exact round trip), the multi-token prediction layers
of published checkpoints skipped with a warning naming them, and a model the family cannot write
refused. Needs the ``interop`` extra."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.models.test_hf_checkpoints import _params, _rewrite, _tensors  # noqa: E402
from tests.models.test_hf_families import check_bfloat16_round_trip, hf_model, torch_blocked  # noqa: E402
from transformer_jax.models import RopePositions, YarnScaling  # noqa: E402
from transformer_jax.models.config import with_changes  # noqa: E402
from transformer_jax.models.hf import config_from_hf, config_to_hf, from_pretrained  # noqa: E402
from transformer_jax.nn.moe_config import BalanceLossConfig, ExpertGroupsConfig, SoftmaxRouter  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(hf model, checkpoint dir, its config.json dict), written once per module."""
    hf = hf_model("deepseek_v3")
    path = tmp_path_factory.mktemp("deepseek_v3")
    hf.save_pretrained(path)
    return hf, path, json.loads((path / "config.json").read_text())


def test_config_maps_mla_dense_first_layers_and_routing(saved):
    hf = saved[2]
    cfg = config_from_hf(hf)
    assert cfg.mla is not None and cfg.moe is not None
    assert (cfg.mla.q_lora_rank, cfg.mla.kv_lora_rank, cfg.mla.qk_nope_head_dim) == (24, 16, 16)
    assert (cfg.mla.qk_rope_head_dim, cfg.mla.v_head_dim, cfg.mla.norm_eps) == (8, 16, 1e-6)
    assert (cfg.position, cfg.dims.d_ff, cfg.use_bias) == (RopePositions(pairing="adjacent"), 96, False)
    assert cfg.dims.n_kv_heads is None and cfg.dims.head_dim is None
    moe = cfg.moe
    assert (moe.n_experts, moe.top_k, moe.n_shared, moe.n_routed, moe.routed_k) == (9, 3, 1, 8, 2)
    assert (moe.first_dense, moe.every, moe.d_expert, moe.segments) == (1, 1, 32, 1)
    router = moe.router
    assert (router.kind, router.renormalize, router.scaling_factor, moe.capacity) == ("sigmoid_topk", True, 2.5, None)
    assert router.groups == ExpertGroupsConfig(n_groups=4, topk_groups=2, score="top2_sum")
    assert router.bias_update_rate > 0  # the bias exists (it holds e_score_correction_bias)
    assert config_from_hf({**hf, "rope_interleave": False}).position == RopePositions(pairing="split")
    published: dict[str, Any] = dict(
        hf, topk_method="noaux_tc", scoring_func="sigmoid", moe_layer_freq=1, ep_size=1, seq_aux=True
    )
    published.update(aux_loss_alpha=0.001, num_nextn_predict_layers=1, auto_map={"AutoConfig": "x.Config"})
    got = config_from_hf(published).moe
    assert got is not None and got.balance == BalanceLossConfig(loss="sequence", coef=0.001)


def test_published_yarn_rope_scaling_maps_field_by_field(saved):
    """DeepSeek-V3's published ``rope_scaling`` (older layout, ``type``), and transformers' reading
    of what it leaves null: factor = max_position_embeddings / original, betas their defaults, a
    null truncate false."""
    published = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                 "original_max_position_embeddings": 4096, "type": "yarn"}  # fmt: skip
    hf = {k: v for k, v in saved[2].items() if k != "rope_parameters"}
    cfg = config_from_hf({**hf, "rope_theta": 1e4, "rope_scaling": published})
    want = YarnScaling(factor=40.0, original_max_len=4096, mscale=1.0, mscale_all_dim=1.0)
    assert cfg.position == RopePositions(theta=1e4, pairing="adjacent", scaling=want)
    sparse = {"rope_type": "yarn", "rope_theta": 1e4, "original_max_position_embeddings": 16, "beta_fast": None,
              "factor": None, "mscale": 0, "truncate": None}  # fmt: skip
    got = config_from_hf({**hf, "rope_parameters": sparse}).position.scaling
    assert got == YarnScaling(factor=hf["max_position_embeddings"] / 16, original_max_len=16, truncate=False)
    assert config_to_hf(cfg)[1]["rope_parameters"] == {
        "rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "mscale_all_dim": -1.0}),
         "model.position.scaling.mscale_all_dim=-1.0: must be > 0"),
        (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "beta_fast": 0.5}),
         "model.position.scaling.beta_fast=0.5: must be above beta_slow=1.0"),
        (dict(attention_bias=True), "'attention_bias'=True is not supported"),
        (dict(num_key_value_heads=2), "'num_key_value_heads'=2 is not supported"),
        (dict(head_dim=16), "'head_dim'=16 is not supported"),
        (dict(topk_method="greedy"), "'topk_method'='greedy' is not supported"),
        (dict(scoring_func="softmax"), "'scoring_func'='softmax' is not supported"),
        (dict(moe_layer_freq=2), "'moe_layer_freq'=2 is not supported"),
        (dict(n_shared_experts=0), "'n_shared_experts'=0 is not supported"),
        (dict(quantization_config={"quant_method": "awq"}), "only fine-grained FP8"),
        (dict(first_k_dense_replace=2), "model.moe.first_dense=2: leaves a stack without MoE layers"),
        (dict(routed_scaling_factor=0.0), "model.moe.router.scaling_factor"),
        (dict(n_group=3), "model.moe.router.groups.n_groups=3: does not divide the 8 routed experts"),
        (dict(n_routed_experts=None), "'n_routed_experts' is missing"),
        (dict(first_k_dense_replace=None), "'first_k_dense_replace' is missing"),
    ],
)  # fmt: skip
def test_what_deepseek_v3_configs_cannot_express_is_refused_by_name(saved, change, message):
    hf = {k: v for k, v in {**saved[2], **change}.items() if v is not None}
    with pytest.raises(ValueError) as err:
        config_from_hf(hf)
    assert message in str(err.value)


def test_bfloat16_checkpoint_loads_and_round_trips_bit_exact(tmp_path):
    """bf16 -> float32 is exact, so the reference is transformers loading the same file in float32
    (see test_hf_checkpoints.py); saving with dtype="bfloat16" keeps the stored bits (the routing
    bias, float32 in our model, included)."""
    hf_model("deepseek_v3").to(torch.bfloat16).save_pretrained(tmp_path / "in")
    check_bfloat16_round_trip(tmp_path, dtype="bfloat16")


def test_multi_token_prediction_layers_are_skipped_with_a_warning_naming_them(saved, tmp_path):
    """Published V3 checkpoints store the MTP module as layer num_hidden_layers (enorm, hnorm,
    eh_proj, shared_head and a whole decoder layer); transformers ignores it, so do we, aloud."""
    _, path, _ = saved
    tensors = _tensors(path)
    extra = {f"model.layers.2.{n}": np.ones((64,), np.float32) for n in ("enorm.weight", "hnorm.weight")}
    extra["model.layers.2.self_attn.kv_a_layernorm.weight"] = np.ones((16,), np.float32)
    mtp = _rewrite(path, tmp_path / "mtp", {**tensors, **extra}, num_nextn_predict_layers=1)
    with torch_blocked():
        _, plain = from_pretrained(path)
        unread = r"deepseek_v3: 3 checkpoint tensor\(s\) left unread: model\.layers\.2\.enorm"
        with pytest.warns(UserWarning, match=unread):
            _, model = from_pretrained(mtp)
    a, b = _params(plain), _params(model)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_save_writes_what_deepseek_v3_expresses_and_refuses_the_rest(saved):
    cfg = config_from_hf(saved[2])
    assert cfg.moe is not None
    family, hf = config_to_hf(cfg)
    assert family.name == "deepseek_v3" and hf["num_nextn_predict_layers"] == 0
    assert (hf["n_routed_experts"], hf["num_experts_per_tok"], hf["first_k_dense_replace"]) == (8, 2, 1)
    every = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, first_dense=0, every=2))
    with pytest.raises(ValueError, match=r"deepseek_v3: cannot express moe\.every=2 \(becomes 1\)"):
        config_to_hf(every, family="deepseek_v3")
    softmax = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, router=SoftmaxRouter(**vars(cfg.moe.router))))
    with pytest.raises(ValueError, match=r"deepseek_v3: cannot express moe\.router='softmax_topk'"):
        config_to_hf(softmax, family="deepseek_v3")
    with pytest.raises(ValueError, match=r"model\.moe\.first_dense=1: .*scan_layers=True"):
        with_changes(cfg, scan_layers=True)


def test_fused_in_memory_experts_load_the_same(saved, tmp_path):
    hf, path, _ = saved
    fused = {k: v.detach().numpy() for k, v in hf.state_dict().items()}  # transformers 5's in-memory layout
    assert (
        "model.layers.1.mlp.experts.gate_up_proj" in fused
        and "model.layers.1.mlp.gate.e_score_correction_bias" in fused
    )
    with torch_blocked():
        _, a = from_pretrained(path)
        _, b = from_pretrained(_rewrite(path, tmp_path / "fused", fused))
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert np.abs(pa[("layers", "layers", 1, "ffn", "bias")]).max() > 0  # the random routing bias arrived
