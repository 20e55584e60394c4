"""A Hugging Face config's RoPE settings <-> ``RopePositions``, as transformers reads them
(``modeling_rope_utils``): the legacy ``rope_scaling`` or the transformers >= 5 ``rope_parameters``
(flat, or one dict per layer type), its own ``rope_theta`` else the top-level key else the family's
default (`DEFAULT_THETA`), and per scaling type the keys of ``_KEYS`` (any other is an error naming it)."""

from __future__ import annotations

from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.spec import ConfigReader
from transformer_jax.nn.position_config import RopePositions, RopeScalingConfig
from transformer_jax.ops.rope import ROPE_THETA

_KEYS = {
    "default": {},
    "linear": {"factor": "factor"},
    "llama3": {
        "factor": "factor",
        "original_max_position_embeddings": "original_max_len",
        "low_freq_factor": "low_freq_factor",
        "high_freq_factor": "high_freq_factor",
    },
    "yarn": {
        "factor": "factor",
        "original_max_position_embeddings": "original_max_len",
        "beta_fast": "beta_fast",
        "beta_slow": "beta_slow",
        "mscale": "mscale",
        "mscale_all_dim": "mscale_all_dim",
        "attention_factor": "attention_factor",
        "truncate": "truncate",
    },
}
_BETAS = {"beta_fast": 32.0, "beta_slow": 1.0}  # transformers reads a null (or 0) beta as these
DEFAULT_THETA = {"mixtral": 1e6, "gemma3_text": 1e6}
"""The RoPE base transformers gives a config of these families that states none (their config
classes' ``default_theta``; Gemma 3's global layers); every other family's is `ROPE_THETA`."""


def rope_key(r: ConfigReader) -> str:
    """The key a config states its RoPE under, for error messages."""
    return "rope_scaling" if r.d.get("rope_scaling") else "rope_parameters"


def with_rope_type(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of a RoPE dict with the legacy key ``type`` read as ``rope_type`` (as transformers does)."""
    params = dict(params)
    if "type" in params:
        params.setdefault("rope_type", params.pop("type"))
    return params


def one_theta(r: ConfigReader, key: str, other: Any, own: Any, where: str) -> float | None:
    """The RoPE base stated in the dict at ``where`` (``own``) or at ``key`` (``other``); both stated
    and different is refused by ``key``, since transformers reads the dict's. None: neither stated."""
    if own is not None and other is not None and float(own) != float(other):
        raise r.unsupported(key, f"differs from the rope_theta={own!r} in {where} (transformers reads that one)")
    theta = own or other
    return None if theta is None else float(theta)


def rope_parameters(r: ConfigReader, layer_type: str | None = None) -> dict[str, Any]:
    """``{"rope_type", "rope_theta", ...}`` of a config (of ``layer_type`` when it has one dict per
    type). transformers reads a non-empty ``rope_scaling`` before ``rope_parameters``, the dict's
    ``rope_theta`` before the top-level key, and YaRN's ``truncate`` at the top level only: a config
    with both RoPE keys, two different bases, or a ``truncate`` beside per-type dicts is refused."""
    legacy, params = r.get("rope_scaling"), r.get("rope_parameters")
    if legacy and params:
        raise r.unsupported(
            "rope_scaling", "the config also has rope_parameters (transformers reads rope_scaling); keep one"
        )
    params = dict(legacy or params or {})
    if layer_type is not None and layer_type in params:
        if "truncate" in params or "truncate" in params[layer_type]:
            why = "with one RoPE dict per layer type transformers reads YaRN's 'truncate' beside them, not in them"
            raise r.unsupported(rope_key(r), why)
        params = params[layer_type]
    params = with_rope_type(params)
    theta = one_theta(r, "rope_theta", r.get("rope_theta"), params.get("rope_theta"), rope_key(r))
    return {"rope_type": "default", **params, "rope_theta": theta or DEFAULT_THETA.get(r.family, ROPE_THETA)}


def _yarn_values(r: ConfigReader, values: dict[str, Any]) -> dict[str, Any]:
    """YaRN as transformers reads it: a null ``factor`` is max_position_embeddings /
    original_max_position_embeddings, a null (or 0) beta its default, a null (or 0) mscale /
    mscale_all_dim unset, a null ``truncate`` false."""
    if "factor" not in values:
        raise r.unsupported(rope_key(r), "YaRN needs 'factor' (null: max_position_embeddings / original)")
    if values["factor"] is None:
        values["factor"] = r.need("max_position_embeddings") / values["original_max_len"]
    for name, default in _BETAS.items():
        values[name] = float(values.get(name) or default)
    for name in ("mscale", "mscale_all_dim"):
        values[name] = float(values[name]) if values.get(name) else None
    if "truncate" in values:
        values["truncate"] = bool(values["truncate"])
    return values


def _llama3_values(r: ConfigReader, values: dict[str, Any]) -> dict[str, Any]:
    """Llama 3's scaling as transformers reads it: every key required but
    ``original_max_position_embeddings``."""
    missing = [theirs for theirs, ours in _KEYS["llama3"].items() if ours != "original_max_len" and ours not in values]
    if missing:
        raise r.unsupported(rope_key(r), f"'llama3' RoPE needs {missing} (transformers requires them)")
    return values


def rope_position(r: ConfigReader, params: dict[str, Any], **fields: Any) -> RopePositions:
    """`RopePositions` of ``rope_parameters(r)`` (plus ``fields``, e.g. the pairing); a scaling type
    or key we lack is an error, a missing (or null) ``original_max_position_embeddings`` (YaRN,
    Llama 3) is ``max_position_embeddings``, as in transformers."""
    kind, key = params.get("rope_type", "default"), rope_key(r)
    if kind not in _KEYS:
        raise r.unsupported(key, f"RoPE scaling {kind!r} has no mapping (known: {', '.join(_KEYS)})")
    keys = _KEYS[kind]
    extra = sorted(set(params) - set(keys) - {"rope_type", "rope_theta"})
    if extra:
        raise r.unsupported(key, f"{kind!r} RoPE keys {extra} have no mapping")
    scaling = None
    if kind != "default":
        values = {ours: params[theirs] for theirs, ours in keys.items() if theirs in params}
        if "original_max_len" in keys.values() and values.get("original_max_len") is None:
            values["original_max_len"] = r.need("max_position_embeddings")
        if kind == "yarn":
            values = _yarn_values(r, values)
        if kind == "llama3":
            values = _llama3_values(r, values)
        if values.get("factor") is None:
            raise r.unsupported(key, f"{kind!r} RoPE needs 'factor'")
        values["factor"] = float(values["factor"])
        scaling = RopeScalingConfig.VARIANTS.get(kind)(**values)
    return RopePositions(theta=float(params["rope_theta"]), scaling=scaling, **fields)


def rope_hf(cfg: ModelConfig) -> dict[str, Any]:
    """``rope_parameters`` (transformers >= 5 layout) of a config: the inverse of `rope_position`
    (a setting at transformers' default left out)."""
    rope = cfg.position
    if not isinstance(rope, RopePositions):
        raise ValueError(f"model.position={rope.kind!r}: this layout needs RoPE")
    if rope.scaling is None:
        return {"rope_type": "default", "rope_theta": rope.theta}
    if rope.scaling.kind not in _KEYS:
        raise ValueError(f"model.position.scaling={rope.scaling.kind!r} has no Hugging Face equivalent here")
    out = {"rope_type": rope.scaling.kind, "rope_theta": rope.theta}
    for theirs, ours in _KEYS[rope.scaling.kind].items():
        value = getattr(rope.scaling, ours)
        if value is not None and not (ours == "truncate" and value):
            out[theirs] = value
    return out
