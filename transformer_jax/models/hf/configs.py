"""config.json <-> ModelConfig through the family registered for its ``model_type``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from transformer_jax.core import configlib
from transformer_jax.models.config import INIT_FIELDS, RUNTIME_FIELDS, ModelConfig, with_changes
from transformer_jax.models.hf.fp8 import fp8_block
from transformer_jax.models.hf.spec import FAMILIES, ConfigReader, Family

# How a model runs, trains or is initialised, not what it computes: never part of a checkpoint's config.
EXECUTION_FIELDS = (*RUNTIME_FIELDS, *INIT_FIELDS)
_MOE_EXECUTION_FIELDS = ("dispatch", "balance.loss", "z_loss_coef")


def family_of(hf: Mapping[str, Any]) -> Family:
    """The family of a config.json dict; an unknown ``model_type`` or architecture is an error."""
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ValueError(
            f"config.json model_type={model_type!r} is not supported; supported: {', '.join(FAMILIES.names())}"
        )
    family = FAMILIES.get(model_type)
    bad = [a for a in hf.get("architectures") or [] if a not in family.architectures]
    if bad:
        raise ValueError(
            f"config.json architectures={bad} is not supported for model_type={model_type!r} (only "
            f"{list(family.architectures)}): its extra heads or towers have no place in a DecoderLM"
        )
    return family


def config_from_hf(hf: Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """The ModelConfig of a Hugging Face config.json dict. Every key is mapped, known not to affect
    the weights or the forward pass, or an error naming it. ``overrides``: ModelConfig fields to
    set on top (e.g. ``max_len=4096``; the names of ``model.execution``'s fields, e.g.
    ``attention_impl="chunked"``, ``dtype="bfloat16"``, set those)."""
    family = family_of(hf)
    reader = ConfigReader(hf, family.name)
    fp8_block(hf)
    reader.ignore("quantization_config")  # FP8 weights are dequantized on load (`fp8`); other kinds refused above
    fields = family.to_config(reader)
    reader.finish()
    return with_changes(with_changes(ModelConfig(), **fields), **overrides)


def _canonical(cfg: ModelConfig) -> dict[str, Any]:
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in EXECUTION_FIELDS}
    d["dims"] = {
        **configlib.to_dict(cfg.dims),
        "n_kv_heads": cfg.dims.resolved_kv_heads,
        "head_dim": cfg.dims.resolved_head_dim,
        "d_ff": cfg.dims.resolved_d_ff,
    }
    attention = configlib.to_dict(cfg.attention)
    attention["qkv_bias"] = cfg.use_bias if cfg.attention.qkv_bias is None else cfg.attention.qkv_bias
    if "scale" in attention:
        attention["scale"] = attention["scale"] or cfg.dims.resolved_head_dim**-0.5
    d["attention"] = attention
    if cfg.moe is not None:
        moe = _flat(configlib.to_dict(cfg.moe))
        moe.update(d_expert=cfg.moe.d_expert or cfg.dims.resolved_d_ff, ffn=cfg.moe.ffn or cfg.ffn)
        d["moe"] = {k: v for k, v in moe.items() if k not in _MOE_EXECUTION_FIELDS}
    return d


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as one level of dotted keys; a variant's kind under the group's own name."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = prefix.rstrip(".") if key == "kind" else prefix + key
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b


def differences(cfg: ModelConfig, other: ModelConfig) -> list[str]:
    """The architecture fields in which two configs differ (execution settings left out)."""
    a, b = _canonical(cfg), _canonical(other)
    out = []
    for name in a:
        if isinstance(a[name], dict) and isinstance(b[name], dict) and a[name].keys() == b[name].keys():
            out += [
                f"{name}.{k}={a[name][k]!r} (becomes {b[name][k]!r})"
                for k in a[name]
                if not _same(a[name][k], b[name][k])
            ]
        elif not _same(a[name], b[name]):
            out.append(f"{name}={a[name]!r} (becomes {b[name]!r})")
    return out


def config_to_hf(cfg: ModelConfig, family: str | None = None) -> tuple[Family, dict[str, Any]]:
    """``(family, config.json dict)`` of a ModelConfig: the named family, or the first registered
    one that expresses the config exactly (its config.json maps back to the same architecture)."""
    candidates = [FAMILIES.get(family)] if family is not None else [FAMILIES.get(n) for n in FAMILIES]
    problems = {}
    for fam in candidates:
        try:
            hf = {"model_type": fam.name, "architectures": [fam.architectures[0]], **fam.to_hf(cfg)}
            back = config_from_hf(hf)
        except (ValueError, TypeError) as e:
            problems[fam.name] = str(e)
            continue
        diff = differences(cfg, back)
        if not diff:
            return fam, {**hf, "dtype": cfg.execution.param_dtype}
        problems[fam.name] = "cannot express " + ", ".join(diff)
    raise ValueError(
        "no Hugging Face family expresses this model config exactly:\n  "
        + "\n  ".join(f"{name}: {why}" for name, why in problems.items())
    )
