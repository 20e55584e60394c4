"""DeepSeek-V2 (``model_type="deepseek_v2"``; V2, V2-Lite, V2.5): the MLA + DeepSeekMoE layout of
``hf.deepseek``, routed as transformers' ``DeepseekV2TopkRouter``: softmax scores in float32; with
``topk_method="group_limited_greedy"`` only the best ``topk_group`` of ``n_group`` groups by their
best score compete (``greedy``: all, ``n_group`` / ``topk_group`` unread, as in transformers); the
top ``num_experts_per_tok`` weighted by their scores, not renormalised, times
``routed_scaling_factor``; dropless. RoPE pairs adjacent dimensions (transformers rotates them as
complex numbers); YaRN as in ``deepseek_v3``, the softmax scale times mscale(``mscale_all_dim``)^2.

Keys that change nothing in the forward pass: ``ep_size``, ``auto_map``, ``output_router_logits``.
Refused by name: ``norm_topk_prob=true`` (transformers' DeepseekV2 never renormalises, DeepSeek's
own code does: the checkpoint's meaning is ambiguous), ``mlp_bias`` (biases on the dense and shared
MLPs only), ``attention_bias``, ``moe_layer_freq`` other than 1, ``scoring_func`` other than
softmax. FP8 weights are dequantized on load (``hf.fp8``).
"""

from __future__ import annotations

from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf import deepseek
from transformer_jax.models.hf.llama import rotary_buffer
from transformer_jax.models.hf.spec import ConfigReader, Family, register
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import SoftmaxRouter

_METHODS = ("greedy", "group_limited_greedy")


def _moe(r: ConfigReader) -> MoEConfig:
    method = r.get("topk_method", "greedy")
    if method not in _METHODS:
        raise r.unsupported("topk_method", f"transformers' DeepseekV2 routes with {' or '.join(_METHODS)}")
    r.expect("scoring_func", ("softmax",), "transformers' DeepseekV2 scores experts with a softmax")
    r.expect(
        "norm_topk_prob",
        (False,),
        "transformers' DeepseekV2 never renormalises the chosen weights while DeepSeek's own code does",
    )
    if method == "greedy":
        r.ignore("n_group", "topk_group")
    router = SoftmaxRouter(
        renormalize=False,
        groups=deepseek.groups_of(r, "max") if method == "group_limited_greedy" else None,
        scaling_factor=float(r.get("routed_scaling_factor", 1.0)),
    )
    return deepseek.moe_of(r, router)


def _config(r: ConfigReader) -> dict[str, Any]:
    r.expect("mlp_bias", (False,), "its biases sit on the dense and shared MLPs only, not on the routed experts")
    return deepseek.fields(r, _moe(r), interleave=True)


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    out = deepseek.hf_fields(cfg, "DeepSeek-V2")
    if getattr(cfg.position, "pairing", None) != "adjacent":
        raise ValueError("model.position.pairing='split' has no DeepSeek-V2 equivalent (it pairs adjacent dims)")
    assert cfg.moe is not None
    if cfg.moe.router.kind != "softmax_topk":
        raise ValueError(f"model.moe.router={cfg.moe.router.kind!r}: DeepSeek-V2 routes with a softmax")
    return {
        **out,
        "topk_method": "greedy" if cfg.moe.router.groups is None else "group_limited_greedy",
        "scoring_func": "softmax",
        "mlp_bias": False,
    }


DEEPSEEK_V2 = register(
    Family(
        name="deepseek_v2",
        architectures=("DeepseekV2ForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=deepseek.links,
        derived=rotary_buffer,
    )
)
