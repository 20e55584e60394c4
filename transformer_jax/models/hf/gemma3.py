"""Gemma 3 text models (``model_type="gemma3_text"``, ``Gemma3ForCausalLM``): Gemma 2's layout
plus QK-norm (RMSNorm (1 + w) over head_dim on q and k) and a RoPE base per layer type (local
layers ``model.position.local_theta``, unscaled; global layers ``model.position.theta`` with their
scaling), five local layers per global one by default. The multimodal ``gemma3`` checkpoints (vision tower) are not
supported; their text part is a ``gemma3_text`` model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.gemma2 import gemma_fields, gemma_hf, gemma_links
from transformer_jax.models.hf.llama import rotary_buffer
from transformer_jax.models.hf.rope import one_theta, rope_hf, with_rope_type
from transformer_jax.models.hf.spec import ConfigReader, Family, register
from transformer_jax.nn.position_config import RopePositions
from transformer_jax.ops.rope import ROPE_THETA

_TYPES = ("full_attention", "sliding_attention")


def _per_type(r: ConfigReader) -> None:
    """Gemma 3's ``rope_parameters`` as transformers completes it: one dict per layer type, a missing
    (or null) one default RoPE; a flat dict, which transformers ignores, is refused."""
    params = r.d.get("rope_parameters") or {}
    if params and not set(_TYPES) & set(params):
        why = (
            "Gemma 3 reads one RoPE dict per layer type ({'full_attention': {...}, 'sliding_attention': {...}}); "
            "transformers ignores a flat one (the global layers' scaling may also go in rope_scaling)"
        )
        raise r.unsupported("rope_parameters", why)
    if params:
        r.d["rope_parameters"] = {**params, **{t: params.get(t) or {"rope_type": "default"} for t in _TYPES}}


def _local_theta(r: ConfigReader) -> float:
    """The sliding layers' base as transformers reads it: ``rope_parameters["sliding_attention"]``'s
    ``rope_theta``, else ``rope_local_base_freq``, else `ROPE_THETA`; the two stated and different
    is refused."""
    local = with_rope_type((r.d.get("rope_parameters") or {}).get("sliding_attention") or {})
    if local.get("rope_type", "default") != "default" or set(local) - {"rope_type", "rope_theta"}:
        raise r.unsupported("rope_parameters", "the sliding layers' RoPE must be unscaled")
    freq, own = r.get("rope_local_base_freq"), local.get("rope_theta")
    return one_theta(r, "rope_local_base_freq", freq, own, "rope_parameters['sliding_attention']") or ROPE_THETA


def _config(r: ConfigReader) -> dict[str, Any]:
    _per_type(r)
    kw = gemma_fields(r, every=6, rope_layer="full_attention", qk_norm=True)
    return {
        **kw,
        "position": dataclasses.replace(kw["position"], local_theta=_local_theta(r)),
    }


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    rope = cfg.position
    if not isinstance(rope, RopePositions):
        raise ValueError(f"model.position={rope.kind!r}: Gemma 3 uses RoPE")
    local = {"rope_type": "default", "rope_theta": rope.local_theta or rope.theta}
    full = rope_hf(cfg)
    if "truncate" in full:
        raise ValueError(
            "model.position.scaling.truncate=False: transformers reads YaRN's truncate at the top level of "
            "rope_parameters only, which Gemma 3 splits by layer type"
        )
    return {
        **gemma_hf(cfg),
        "rope_parameters": {"full_attention": full, "sliding_attention": local},
        "use_bidirectional_attention": False,
    }


GEMMA3_TEXT = register(
    Family(
        name="gemma3_text",
        architectures=("Gemma3ForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=gemma_links,
        derived=rotary_buffer,
    )
)
