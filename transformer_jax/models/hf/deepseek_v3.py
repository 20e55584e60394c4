"""DeepSeek-V3 (``model_type="deepseek_v3"``): Multi-head Latent Attention, the first
``first_k_dense_replace`` layers with a dense MLP of width ``intermediate_size``, the others with
DeepSeekMoE: ``n_shared_experts`` shared experts (one MLP of width n_shared x
``moe_intermediate_size``) plus ``num_experts_per_tok`` of ``n_routed_experts`` routed experts.

Attention maps 1:1 onto ``nn.mla`` (``rope_interleave`` -> ``position.pairing`` adjacent / split; the
latent norms' epsilon is DeepseekV3RMSNorm's default 1e-6, as in transformers). Routing as
transformers' ``DeepseekV3TopkRouter``: sigmoid scores in float32; ``e_score_correction_bias`` (our
auxiliary-loss-free balancing bias, ``ffn.bias``) added for the choice only; the best
``topk_group`` of ``n_group`` groups by the sum of their two best biased scores; the top
``num_experts_per_tok`` of those; weights the unbiased scores, renormalised when
``norm_topk_prob``, times ``routed_scaling_factor``; dropless. Our MoEConfig counts shared experts
among its experts, so ``n_experts = n_routed + n_shared`` and ``top_k = num_experts_per_tok +
n_shared``, and our one shared FFN of width n_shared x d_expert is HF's ``shared_experts`` MLP.

Keys that change nothing in the forward pass: ``num_nextn_predict_layers`` (the multi-token
prediction layers, stored as layers ``num_hidden_layers``...: transformers' DeepseekV3ForCausalLM
ignores them, and loading skips their tensors with a warning naming them), ``ep_size`` (training
parallelism), ``auto_map`` (remote code), ``output_router_logits``. ``aux_loss_alpha`` /
``seq_aux`` (DeepSeek's own keys) map to ``moe.balance`` (training only; alpha 0: None). The
bias's update rate has no key: a loaded model gets ``router.bias_update_rate=1e-3`` (V3's gamma), which
only a training call reads. YaRN (``rope_scaling`` / ``rope_parameters`` of type yarn, as V3's
published config uses it) maps to ``position.scaling=yarn`` on the RoPE part of each head, its
``mscale_all_dim`` also multiplying the softmax scale by mscale^2 (``DeepseekV3Attention.scaling``).
Refused by name: ``attention_bias`` (biases on attention only), ``moe_layer_freq`` other than 1,
``topk_method`` other than noaux_tc, ``scoring_func`` other than sigmoid, FP8
``quantization_config``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import decoder_fields, decoder_hf, ends_links, layer, mlp_links, rotary_buffer
from transformer_jax.models.hf.mixtral import expert_links
from transformer_jax.models.hf.spec import ConfigReader, Family, Link, copy, linear, register
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig, balance_loss
from transformer_jax.nn.moe_config import ExpertGroupsConfig, SigmoidRouter

BIAS_UPDATE_RATE = 1e-3  # DeepSeek-V3's gamma (sec. 4.2); config.json has no key for it
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _mla(r: ConfigReader) -> MLAConfig:
    rope, nope = r.need("qk_rope_head_dim"), r.need("qk_nope_head_dim")
    r.expect("head_dim", (rope,), "transformers sets it to qk_rope_head_dim")
    r.expect("qk_head_dim", (nope + rope,), "transformers sets it to qk_nope_head_dim + qk_rope_head_dim")
    return MLAConfig(
        q_lora_rank=r.get("q_lora_rank"),
        kv_lora_rank=r.need("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=r.need("v_head_dim"),
    )


def _moe(r: ConfigReader) -> MoEConfig:
    r.expect("moe_layer_freq", (1,), "transformers' DeepseekV3 has experts in every layer after the dense ones")
    r.expect("topk_method", ("noaux_tc",), "routing is transformers' group-limited top-k with the bias")
    r.expect("scoring_func", ("sigmoid",), "transformers' DeepseekV3 scores experts with a sigmoid")
    shared = r.need("n_shared_experts")
    if shared <= 0:
        raise r.unsupported("n_shared_experts", "transformers' DeepseekV3 always has a shared-experts MLP")
    return MoEConfig(
        n_experts=r.need("n_routed_experts") + shared,
        top_k=r.need("num_experts_per_tok") + shared,
        n_shared=shared,
        first_dense=r.need("first_k_dense_replace"),
        d_expert=r.need("moe_intermediate_size"),
        router=SigmoidRouter(
            renormalize=bool(r.need("norm_topk_prob")),
            groups=_groups(r),
            scaling_factor=float(r.need("routed_scaling_factor")),
            bias_update_rate=BIAS_UPDATE_RATE,
        ),
        capacity=None,
        balance=balance_loss("sequence" if r.get("seq_aux", True) else "expert", float(r.get("aux_loss_alpha", 0.0))),
    )


def _groups(r: ConfigReader) -> ExpertGroupsConfig | None:
    n, keep = r.need("n_group"), r.need("topk_group")
    if n == 1 and keep == 1:
        return None
    return ExpertGroupsConfig(n_groups=n, topk_groups=keep, score="top2_sum")


def _config(r: ConfigReader) -> dict[str, Any]:
    r.ignore("num_nextn_predict_layers", "num_mtp_layers", "ep_size", "auto_map", "output_router_logits")
    if r.d.get("quantization_config") is not None:
        raise r.unsupported("quantization_config", "FP8 block-quantised weights are not read; dequantise them first")
    r.expect("attention_bias", (False,), "its biases sit on attention only; our use_bias puts them on the MLPs too")
    h = r.need("num_attention_heads")
    r.expect("num_key_value_heads", (h,), "MLA shares one latent; transformers repeats keys heads // kv_heads times")
    kw = decoder_fields(r)
    interleave = r.get("rope_interleave", True)
    return {
        **kw,
        "n_kv_heads": None,
        "head_dim": None,
        "position": dataclasses.replace(kw["position"], pairing="adjacent" if interleave else "split"),
        "use_bias": False,
        "mla": _mla(r),
        "moe": _moe(r),
    }


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.mla is None or cfg.moe is None:
        raise ValueError("a DeepSeek-V3 checkpoint needs model.mla and model.moe")
    mla, moe = cfg.mla, cfg.moe
    groups, balance = moe.router.groups, moe.balance
    return {
        **decoder_hf(cfg),
        "num_key_value_heads": cfg.dims.n_heads,
        "head_dim": mla.qk_rope_head_dim,
        "qk_head_dim": mla.qk_head_dim,
        "rope_interleave": getattr(cfg.position, "pairing", None) == "adjacent",
        "attention_bias": False,
        **{key: getattr(mla, key) for key in _MLA_KEYS},
        "n_routed_experts": moe.n_routed,
        "n_shared_experts": moe.n_shared,
        "num_experts_per_tok": moe.routed_k,
        "moe_intermediate_size": (moe.d_expert or cfg.dims.resolved_d_ff) // moe.segments,
        "first_k_dense_replace": moe.first_dense,
        "n_group": 1 if groups is None else groups.n_groups,
        "topk_group": 1 if groups is None else groups.topk_groups,
        "norm_topk_prob": moe.router.renormalize,
        "routed_scaling_factor": moe.router.scaling_factor,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "aux_loss_alpha": 0.0 if balance is None else balance.coef,
        "seq_aux": balance is None or balance.loss == "sequence",
        "num_nextn_predict_layers": 0,
    }


def _attention_links(cfg: ModelConfig, i: int, hf: str) -> list[Link]:
    """MLA's projections and latent norms (``nn.mla.MultiHeadLatentAttention``) of layer i."""
    assert cfg.mla is not None
    m, D, H = cfg.mla, cfg.dims.d_model, cfg.dims.n_heads
    N, R, V, C = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ours = f"{layer(i)}.self_attn"
    if m.q_lora_rank is None:
        links = [linear(f"{hf}.q_proj.weight", f"{ours}.q.kernel", (D,), (H, N + R))]
    else:
        links = [
            linear(f"{hf}.q_a_proj.weight", f"{ours}.q_a.kernel", (D,), (m.q_lora_rank,)),
            copy(f"{hf}.q_a_layernorm.weight", f"{ours}.q_a_norm.scale"),
            linear(f"{hf}.q_b_proj.weight", f"{ours}.q_b.kernel", (m.q_lora_rank,), (H, N + R)),
        ]
    return links + [
        linear(f"{hf}.kv_a_proj_with_mqa.weight", f"{ours}.kv_a.kernel", (D,), (C + R,)),
        copy(f"{hf}.kv_a_layernorm.weight", f"{ours}.kv_a_norm.scale"),
        linear(f"{hf}.kv_b_proj.weight", f"{ours}.kv_b.kernel", (C,), (H, N + V)),
        linear(f"{hf}.o_proj.weight", f"{ours}.o.kernel", (H, V), (D,)),
    ]


PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _moe_links(cfg: ModelConfig, i: int, hf: str, names: AbstractSet[str] | None) -> list[Link]:
    """Router, bias, routed experts and the shared-experts MLP of MoE layer i (``hf``: ``...mlp``)."""
    assert cfg.moe is not None
    spec = cfg.moe.spec(cfg.dims.resolved_d_ff, cfg.ffn)
    ffn, D, F = f"{layer(i)}.ffn", cfg.dims.d_model, spec.n_shared * (spec.d_shared or spec.d_expert)
    links = expert_links(cfg, ffn, f"{hf}.gate", f"{hf}.experts", names, PROJECTIONS, n_experts=spec.n_experts)
    links.append(copy(f"{hf}.gate.e_score_correction_bias", f"{ffn}.bias"))
    shared = (("gate_proj", "w_gate", (D,), (F,)), ("up_proj", "w_in", (D,), (F,)), ("down_proj", "w_out", (F,), (D,)))
    links += [linear(f"{hf}.shared_experts.{t}.weight", f"{ffn}.shared.{w}.kernel", a, b) for t, w, a, b in shared]
    return links


def _links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    assert cfg.moe is not None
    links = ends_links(cfg, names)
    for i in range(cfg.dims.n_layers):
        p = f"model.layers.{i}"
        links += _attention_links(cfg, i, f"{p}.self_attn")
        links += [
            copy(f"{p}.input_layernorm.weight", f"{layer(i)}.self_attn_norm.scale"),
            copy(f"{p}.post_attention_layernorm.weight", f"{layer(i)}.ffn_norm.scale"),
        ]
        if i >= cfg.moe.first_dense and (i + 1) % cfg.moe.every == 0:
            links += _moe_links(cfg, i, f"{p}.mlp", names)
        else:
            links += mlp_links(cfg, i, f"{p}.mlp")
    return links


_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def _mtp_layers(cfg: ModelConfig, names: AbstractSet[str]) -> tuple[AbstractSet[str], str]:
    """Tensors of layers num_hidden_layers... (the multi-token prediction modules)."""
    found = {n for n in names if (m := _LAYER.match(n)) and int(m.group(1)) >= cfg.dims.n_layers}
    why = (
        f"they are DeepSeek-V3's multi-token prediction layer(s) (num_nextn_predict_layers, stored after the "
        f"{cfg.dims.n_layers} decoder layers), which transformers' DeepseekV3ForCausalLM ignores as well: next-token "
        "predictions need none of them"
    )
    return found, why


DEEPSEEK_V3 = register(
    Family(
        name="deepseek_v3",
        architectures=("DeepseekV3ForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=_links,
        derived=rotary_buffer,
        skipped=_mtp_layers,
    )
)
