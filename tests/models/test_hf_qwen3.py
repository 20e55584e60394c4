"""Qwen3 and Qwen3-MoE beyond the parity tests of test_hf_families.py: their config mapping (QK-norm,
head_dim, which layers have experts, ``norm_topk_prob``, both spellings of the expert count), every
setting we cannot represent refused naming its key, bfloat16 checkpoints (logits of the upcast
weights, bit-exact round trip), transformers 5's fused in-memory expert layout, and a MoE config
the family cannot write refused. Needs the ``interop`` extra."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.models.test_hf_checkpoints import _params, _rewrite  # noqa: E402
from tests.models.test_hf_families import check_bfloat16_round_trip, hf_model, torch_blocked  # noqa: E402
from transformer_jax.models import SoftmaxAttention  # noqa: E402
from transformer_jax.models.hf import config_from_hf, config_to_hf, from_pretrained  # noqa: E402
from transformer_jax.nn.norm_config import RMSNormConfig  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (hf model, checkpoint dir, its config.json dict), written once per module."""
    out = {}
    for case in ("qwen3", "qwen3_moe"):
        hf = hf_model(case)
        path = tmp_path_factory.mktemp(case)
        hf.save_pretrained(path)
        out[case] = (hf, path, json.loads((path / "config.json").read_text()))
    return out


def test_configs_map_qk_norm_head_dim_and_the_expert_layers(saved):
    dense = config_from_hf(saved["qwen3"][2])
    assert (dense.attention.qk_norm, dense.norm, dense.dims.head_dim) == (True, RMSNormConfig(eps=1e-6), 24)
    assert not dense.use_bias and dense.moe is None and dense.position.kind == "rope"
    hf = saved["qwen3_moe"][2]
    assert hf["num_local_experts"] == 4 and "num_experts" not in hf  # how transformers 5 writes it
    cfg = config_from_hf(hf)
    assert cfg.moe is not None and cfg.attention.qk_norm and cfg.dims.d_ff == 96
    assert (cfg.moe.n_experts, cfg.moe.top_k, cfg.moe.every, cfg.moe.d_expert) == (4, 2, 2, 32)
    assert cfg.moe.router.renormalize and cfg.moe.capacity is None and cfg.moe.n_shared == 0
    published = {k: v for k, v in hf.items() if k not in ("num_local_experts", "mlp_only_layers")}
    assert config_from_hf({**published, "num_experts": 4, "decoder_sparse_step": 2}) == cfg
    assert config_from_hf({**hf, "norm_topk_prob": False}).moe.router.renormalize is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        ("qwen3", dict(use_sliding_window=True, sliding_window=4), "'use_sliding_window'=True is not supported"),
        ("qwen3", dict(attention_bias=True), "'attention_bias'=True is not supported"),
        ("qwen3", dict(layer_types=["full_attention", "sliding_attention"]), "'layer_types'"),
        ("qwen3", dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0}), "'dynamic'"),
        ("qwen3_moe", dict(use_sliding_window=True), "'use_sliding_window'=True is not supported"),
        ("qwen3_moe", dict(attention_bias=True), "'attention_bias'=True is not supported"),
        ("qwen3_moe", dict(mlp_only_layers=[1]), "'mlp_only_layers'=[1] is not supported: experts in layers [0]"),
        ("qwen3_moe", dict(mlp_only_layers=[0, 1]), "leaves no layer with experts"),
        ("qwen3_moe", dict(mlp_only_layers=[], decoder_sparse_step=3), "'decoder_sparse_step'=3"),
        ("qwen3_moe", dict(shared_expert_intermediate_size=16), "shared_expert_intermediate_size=16"),
        ("qwen3_moe", dict(num_experts=8), "'num_local_experts'=4 is not supported: differs from num_experts=8"),
        ("qwen3_moe", dict(num_local_experts=0), "'num_local_experts'=0 is not supported: a model without experts"),
        ("qwen3_moe", dict(num_local_experts=None), "'num_experts' is missing"),
        ("qwen3_moe", dict(num_experts_per_tok=None), "'num_experts_per_tok' is missing"),
    ],
)
def test_what_qwen3_configs_cannot_express_is_refused_by_name(saved, case, change, message):
    hf = {k: v for k, v in {**saved[case][2], **change}.items() if v is not None}
    with pytest.raises(ValueError) as err:
        config_from_hf(hf)
    assert message in str(err.value)


@pytest.mark.parametrize("case", ["qwen3", "qwen3_moe"])
def test_bfloat16_checkpoint_loads_and_round_trips_bit_exact(case, tmp_path):
    """bf16 -> float32 is exact, so the reference is transformers loading the same file in float32
    (see test_hf_checkpoints.py); dtype="bfloat16" keeps the stored bits through our save."""
    hf_model(case).to(torch.bfloat16).save_pretrained(tmp_path / "in")
    check_bfloat16_round_trip(tmp_path)


def test_fused_in_memory_experts_load_the_same(saved, tmp_path):
    hf, path, _ = saved["qwen3_moe"]
    fused = {k: v.detach().numpy() for k, v in hf.state_dict().items()}  # transformers 5's in-memory layout
    assert "model.layers.1.mlp.experts.gate_up_proj" in fused and "model.layers.0.mlp.gate_proj.weight" in fused
    with torch_blocked():
        _, a = from_pretrained(path)
        _, b = from_pretrained(_rewrite(path, tmp_path / "fused", fused))
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_save_writes_what_qwen3_moe_expresses_and_refuses_the_rest(saved):
    cfg = config_from_hf(saved["qwen3_moe"][2])
    assert cfg.moe is not None
    wide = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, d_expert=None))  # experts as wide as d_ff
    family, hf = config_to_hf(wide)
    assert family.name == "qwen3_moe" and hf["moe_intermediate_size"] == 96 and hf["decoder_sparse_step"] == 2
    shared = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, n_shared=1))
    with pytest.raises(ValueError, match=r"qwen3_moe: cannot express moe\.n_shared=1 \(becomes 0\)"):
        config_to_hf(shared, family="qwen3_moe")
    with pytest.raises(ValueError, match=r"qwen3: cannot express .*qk_norm=False \(becomes True\)"):
        without = dataclasses.replace(config_from_hf(saved["qwen3"][2]), attention=SoftmaxAttention())
        config_to_hf(without, family="qwen3")
