"""DeepSeek-V3 (``model_type="deepseek_v3"``): the MLA + DeepSeekMoE layout of ``hf.deepseek``,
routed as transformers' ``DeepseekV3TopkRouter``: sigmoid scores in float32;
``e_score_correction_bias`` (our auxiliary-loss-free balancing bias, ``ffn.bias``) added for the
choice only; the best ``topk_group`` of ``n_group`` groups by the sum of their two best biased
scores; the top ``num_experts_per_tok`` of those; weights the unbiased scores, renormalised when
``norm_topk_prob``, times ``routed_scaling_factor``; dropless. ``rope_interleave`` -> ``position.pairing``
adjacent / split.

Keys that change nothing in the forward pass: ``num_nextn_predict_layers`` (the multi-token
prediction layers, stored as layers ``num_hidden_layers``...: transformers' DeepseekV3ForCausalLM
ignores them, and loading skips their tensors with a warning naming them), ``ep_size`` (training
parallelism), ``auto_map`` (remote code), ``output_router_logits``. The bias's update rate has no
key: a loaded model gets ``router.bias_update_rate=1e-3`` (V3's gamma), which only a training call
reads. YaRN (``rope_scaling`` / ``rope_parameters`` of type yarn, as V3's published config uses it)
maps to ``position.scaling=yarn`` on the RoPE part of each head, its ``mscale_all_dim`` also
multiplying the softmax scale by mscale^2 (``DeepseekV3Attention.scaling``). Refused by name:
``attention_bias`` (biases on attention only), ``moe_layer_freq`` other than 1, ``topk_method``
other than noaux_tc, ``scoring_func`` other than sigmoid. FP8 weights are dequantized on
load (``hf.fp8``).
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf import deepseek
from transformer_jax.models.hf.llama import layer, rotary_buffer
from transformer_jax.models.hf.spec import ConfigReader, Family, Link, copy, register
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import SigmoidRouter

BIAS_UPDATE_RATE = 1e-3  # DeepSeek-V3's gamma (sec. 4.2); config.json has no key for it


def _moe(r: ConfigReader) -> MoEConfig:
    r.expect("topk_method", ("noaux_tc",), "routing is transformers' group-limited top-k with the bias")
    r.expect("scoring_func", ("sigmoid",), "transformers' DeepseekV3 scores experts with a sigmoid")
    router = SigmoidRouter(
        renormalize=bool(r.need("norm_topk_prob")),
        groups=deepseek.groups_of(r, "top2_sum"),
        scaling_factor=float(r.need("routed_scaling_factor")),
        bias_update_rate=BIAS_UPDATE_RATE,
    )
    return deepseek.moe_of(r, router)


def _config(r: ConfigReader) -> dict[str, Any]:
    r.ignore("num_nextn_predict_layers", "num_mtp_layers")
    return deepseek.fields(r, _moe(r), interleave=r.get("rope_interleave", True))


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    return {
        **deepseek.hf_fields(cfg, "DeepSeek-V3"),
        "rope_interleave": getattr(cfg.position, "pairing", None) == "adjacent",
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "num_nextn_predict_layers": 0,
    }


def _moe_links(cfg: ModelConfig, i: int, hf: str, names: AbstractSet[str] | None) -> list[Link]:
    """`deepseek.moe_links` and the routing bias."""
    return [*deepseek.moe_links(cfg, i, hf, names), copy(f"{hf}.gate.e_score_correction_bias", f"{layer(i)}.ffn.bias")]


def _links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    return deepseek.links(cfg, names, _moe_links)


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
