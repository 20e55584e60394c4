"""The model section's renamed keys: norm, position, execution, attention, init, embeddings, dims and
the MoE's router, capacity and balance loss became nested groups.

Each step is an (upgrade, legacy) pair acting in place on the section's dict (see the package doc)."""

from __future__ import annotations

from typing import Any

# model.position: one settings class per encoding (was: a name plus rope_*/relative_* fields).
_OLD_POSITION_DEFAULTS: dict[str, Any] = {
    "rope_theta": 10000.0,
    "rope_pairing": "split",
    "rope_scaling": "none",
    "rope_scaling_factor": 1.0,
    "rope_original_max_len": 2048,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_local_theta": None,
    "relative_buckets": 32,
    "relative_max_distance": 128,
}
_ROPE = {"rope_theta": "theta", "rope_pairing": "pairing", "rope_local_theta": "local_theta"}
_RELATIVE = {"relative_buckets": "buckets", "relative_max_distance": "max_distance"}
_SCALING = {
    "rope_scaling_factor": "factor",
    "rope_original_max_len": "original_max_len",
    "rope_low_freq_factor": "low_freq_factor",
    "rope_high_freq_factor": "high_freq_factor",
}
_SCALING_READS = {
    "linear": ("factor",),
    "ntk": ("factor",),
    "yarn": ("factor", "original_max_len"),
    "llama3": ("factor", "original_max_len", "low_freq_factor", "high_freq_factor"),
}

# model.execution: how the model runs (was: flat fields of the model).
_EXECUTION = (
    "dtype",
    "param_dtype",
    "attention_impl",
    "attention_block_size",
    "decode_impl",
    "decode_block_size",
    "scan_layers",
    "remat",
)


def _upgrade_position(model: dict[str, Any]) -> None:
    if not isinstance(model.get("position"), str):
        return
    kind = model.pop("position")
    old = {name: model.pop(name, default) for name, default in _OLD_POSITION_DEFAULTS.items()}
    new: dict[str, Any] = {"kind": kind}
    if kind == "rope":
        new.update({ours: old[theirs] for theirs, ours in _ROPE.items()})
        scaling = old["rope_scaling"]
        if scaling == "none":
            new["scaling"] = None
        else:
            fields = {ours: old[theirs] for theirs, ours in _SCALING.items()}
            new["scaling"] = {"kind": scaling, **{k: fields[k] for k in _SCALING_READS[scaling]}}
    elif kind == "relative_bias":
        new.update({ours: old[theirs] for theirs, ours in _RELATIVE.items()})
    model["position"] = new


def _legacy_position(model: dict[str, Any]) -> None:
    if not isinstance(model.get("position"), dict):
        return
    new = dict(model.pop("position"))
    kind = new.pop("kind")
    old = dict(_OLD_POSITION_DEFAULTS)
    if kind == "rope":
        old.update({theirs: new[ours] for theirs, ours in _ROPE.items()})
        scaling = new.get("scaling")
        if scaling is not None:
            old["rope_scaling"] = scaling["kind"]
            old.update({theirs: scaling[ours] for theirs, ours in _SCALING.items() if ours in scaling})
    elif kind == "relative_bias":
        old.update({theirs: new[ours] for theirs, ours in _RELATIVE.items()})
    model["position"] = kind
    model.update(old)


def _upgrade_execution(model: dict[str, Any]) -> None:
    if "execution" in model or not any(name in model for name in _EXECUTION):
        return
    model["execution"] = {name: model.pop(name) for name in _EXECUTION if name in model}


def _legacy_execution(model: dict[str, Any]) -> None:
    if isinstance(model.get("execution"), dict):
        model.update(model.pop("execution"))


def _upgrade_norm(model: dict[str, Any]) -> None:
    if not isinstance(model.get("norm"), str):
        return
    kind = model.pop("norm")
    new = {"kind": kind, "eps": model.pop("norm_eps", 1e-5)}
    bias = model.pop("norm_bias", True)
    if kind == "layernorm":
        new["bias"] = bias
    model["norm"] = new


def _legacy_norm(model: dict[str, Any]) -> None:
    if not isinstance(model.get("norm"), dict):
        return
    new = dict(model.pop("norm"))
    model.update(norm=new["kind"], norm_eps=new["eps"], norm_bias=new.get("bias", True))


# model.attention: one settings class per kind (was: attention_kind, attention_pattern and their fields).
_OLD_ATTENTION_DEFAULTS: dict[str, Any] = {
    "attention_kind": "softmax",
    "attention_window": None,
    "attention_scale": None,
    "attention_pattern": "uniform",
    "attention_global_every": 2,
    "attention_local_window": None,
    "attn_softcap": None,
    "qk_norm": False,
    "causal": True,
    "qkv_bias": None,
}
_LOGITS = {"attention_scale": "scale", "attn_softcap": "softcap", "qk_norm": "qk_norm"}
_ATTENTION_KEEP = {"causal": "causal", "qkv_bias": "qkv_bias"}
_ATTENTION_OWN = {
    "softmax": {},
    "sliding_window": {"attention_window": "window"},
    "local_global": {"attention_local_window": "local_window", "attention_global_every": "global_every"},
    "linear": {},
}


def _old_attention_names(kind: str) -> dict[str, str]:
    logits = {} if kind == "linear" else _LOGITS
    return {**_ATTENTION_OWN[kind], **logits, **_ATTENTION_KEEP}


def _upgrade_attention(model: dict[str, Any]) -> None:
    if isinstance(model.get("attention"), dict) or not any(name in model for name in _OLD_ATTENTION_DEFAULTS):
        return
    old = {name: model.pop(name, default) for name, default in _OLD_ATTENTION_DEFAULTS.items()}
    kind = "local_global" if old["attention_pattern"] == "local_global" else old["attention_kind"]
    new = {ours: old[theirs] for theirs, ours in _old_attention_names(kind).items()}
    model["attention"] = {"kind": kind, **new}


def _legacy_attention(model: dict[str, Any]) -> None:
    if not isinstance(model.get("attention"), dict):
        return
    new = dict(model.pop("attention"))
    kind = new.pop("kind")
    old = dict(_OLD_ATTENTION_DEFAULTS)
    if kind == "local_global":
        old["attention_pattern"] = "local_global"
    else:
        old["attention_kind"] = kind
    old.update({theirs: new[ours] for theirs, ours in _old_attention_names(kind).items() if ours in new})
    model.update(old)


# model.init: how fresh weights are drawn (was: init, init_std, zero_init_out).
_INIT = {"init": ("scheme", "normal"), "init_std": ("std", 0.02), "zero_init_out": ("zero_out", False)}


def _upgrade_init(model: dict[str, Any]) -> None:
    if isinstance(model.get("init"), dict) or not any(name in model for name in _INIT):
        return
    model["init"] = {ours: model.pop(theirs, default) for theirs, (ours, default) in _INIT.items()}


def _legacy_init(model: dict[str, Any]) -> None:
    if not isinstance(model.get("init"), dict):
        return
    new = model.pop("init")
    model.update({theirs: new.get(ours, default) for theirs, (ours, default) in _INIT.items()})


# model.embeddings: the token embeddings (was: tie_embeddings, scale_embeddings, share_embeddings).
_EMBEDDINGS = {
    "tie_embeddings": ("tie", True),
    "scale_embeddings": ("scale", False),
    "share_embeddings": ("share", True),
}


def _upgrade_embeddings(model: dict[str, Any]) -> None:
    if "embeddings" in model or not any(name in model for name in _EMBEDDINGS):
        return
    model["embeddings"] = {ours: model.pop(theirs, default) for theirs, (ours, default) in _EMBEDDINGS.items()}


def _legacy_embeddings(model: dict[str, Any]) -> None:
    if not isinstance(model.get("embeddings"), dict):
        return
    new = model.pop("embeddings")
    model.update({theirs: new.get(ours, default) for theirs, (ours, default) in _EMBEDDINGS.items()})


# model.dims: the sizes (were flat fields of the model); final_softcap went to model.embeddings.
_DIMS = (
    "vocab_size",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "d_ff",
    "n_layers",
    "n_encoder_layers",
    "max_len",
)


def _upgrade_dims(model: dict[str, Any]) -> None:
    if "final_softcap" in model:
        model.setdefault("embeddings", {})["final_softcap"] = model.pop("final_softcap")
    if "dims" in model or not any(name in model for name in _DIMS):
        return
    model["dims"] = {name: model.pop(name) for name in _DIMS if name in model}


def _legacy_dims(model: dict[str, Any]) -> None:
    if isinstance(model.get("dims"), dict):
        model.update(model.pop("dims"))
    embeddings = model.get("embeddings")
    if isinstance(embeddings, dict) and "final_softcap" in embeddings:
        model["final_softcap"] = embeddings.pop("final_softcap")


# model.moe.router, .capacity, .balance: groups with the fields their choice reads (were flat in model.moe).
_OLD_MOE_DEFAULTS: dict[str, Any] = {
    "router": "softmax_topk",
    "renormalize": False,
    "n_groups": 1,
    "topk_groups": 1,
    "group_score": "max",
    "routed_scaling_factor": 1.0,
    "bias_update_rate": 0.0,
    "capacity_factor": None,
    "drop_order": "rank",
    "balance_loss": "switch",
    "balance_coef": 0.01,
}
_ROUTER = {
    "renormalize": "renormalize",
    "routed_scaling_factor": "scaling_factor",
    "bias_update_rate": "bias_update_rate",
}
_GROUPS = {"n_groups": "n_groups", "topk_groups": "topk_groups", "group_score": "score"}
_CAPACITY = {"capacity_factor": "factor", "drop_order": "drop_order"}
_BALANCE = {"balance_loss": "loss", "balance_coef": "coef"}


def _upgrade_moe(model: dict[str, Any]) -> None:
    moe = model.get("moe")
    if not isinstance(moe, dict) or isinstance(moe.get("router"), dict):
        return
    if not any(name in moe for name in _OLD_MOE_DEFAULTS):
        return
    old = {name: moe.pop(name, default) for name, default in _OLD_MOE_DEFAULTS.items()}
    groups = None if old["n_groups"] == 1 else {ours: old[theirs] for theirs, ours in _GROUPS.items()}
    moe["router"] = {"kind": old["router"], **{ours: old[theirs] for theirs, ours in _ROUTER.items()}, "groups": groups}
    capped = old["capacity_factor"] is not None
    moe["capacity"] = {ours: old[theirs] for theirs, ours in _CAPACITY.items()} if capped else None
    balanced = old["balance_coef"] != 0
    moe["balance"] = {ours: old[theirs] for theirs, ours in _BALANCE.items()} if balanced else None


def _legacy_moe(model: dict[str, Any]) -> None:
    moe = model.get("moe")
    if not isinstance(moe, dict) or not isinstance(moe.get("router"), dict):
        return
    router = dict(moe.pop("router"))
    capacity, balance = moe.pop("capacity", None), moe.pop("balance", None)
    old = dict(_OLD_MOE_DEFAULTS, router=router["kind"], balance_coef=0.0)
    old.update({theirs: router[ours] for theirs, ours in _ROUTER.items() if ours in router})
    for group, names in ((router.get("groups"), _GROUPS), (capacity, _CAPACITY), (balance, _BALANCE)):
        if group is not None:
            old.update({theirs: group[ours] for theirs, ours in names.items() if ours in group})
    moe.update(old)


PATH = ("model",)
STEPS = (
    (_upgrade_norm, _legacy_norm),
    (_upgrade_position, _legacy_position),
    (_upgrade_execution, _legacy_execution),
    (_upgrade_attention, _legacy_attention),
    (_upgrade_init, _legacy_init),
    (_upgrade_embeddings, _legacy_embeddings),
    (_upgrade_dims, _legacy_dims),  # after embeddings: final_softcap moves into that group
    (_upgrade_moe, _legacy_moe),
)

RENAMED: dict[str, str] = {
    "model.norm_eps": "model.norm.eps",
    "model.norm_bias": "model.norm.bias (with model.norm=layernorm)",
    **{f"model.{name}": f"model.execution.{name}" for name in _EXECUTION},
    **{f"model.{old}": f"model.position.{new} (with model.position=rope)" for old, new in _ROPE.items()},
    **{f"model.{old}": f"model.position.{new} (with model.position=relative_bias)" for old, new in _RELATIVE.items()},
    "model.rope_scaling": "model.position.scaling (with model.position=rope; none, linear, ntk, yarn or llama3)",
    **{f"model.{old}": f"model.position.scaling.{new}" for old, new in _SCALING.items()},
    "model.attention_kind": "model.attention (softmax, sliding_window, local_global or linear)",
    "model.attention_pattern": "model.attention (local_global)",
    "model.attention_window": "model.attention.window (with model.attention=sliding_window)",
    "model.attention_local_window": "model.attention.local_window (with model.attention=local_global)",
    "model.attention_global_every": "model.attention.global_every (with model.attention=local_global)",
    "model.attention_scale": "model.attention.scale",
    "model.attn_softcap": "model.attention.softcap",
    "model.qk_norm": "model.attention.qk_norm",
    "model.causal": "model.attention.causal",
    "model.qkv_bias": "model.attention.qkv_bias",
    "model.init_std": "model.init.std",
    "model.zero_init_out": "model.init.zero_out",
    **{f"model.{old}": f"model.embeddings.{new}" for old, (new, _) in _EMBEDDINGS.items()},
    **{f"model.{name}": f"model.dims.{name}" for name in _DIMS},
    "model.final_softcap": "model.embeddings.final_softcap",
    "model.moe.renormalize": "model.moe.router.renormalize",
    "model.moe.routed_scaling_factor": "model.moe.router.scaling_factor",
    "model.moe.bias_update_rate": "model.moe.router.bias_update_rate",
    **{
        f"model.moe.{old}": f"model.moe.router.groups.{new} (with model.moe.router.groups=on)"
        for old, new in _GROUPS.items()
    },
    "model.moe.capacity_factor": "model.moe.capacity.factor (with model.moe.capacity=on; none: dropless)",
    "model.moe.drop_order": "model.moe.capacity.drop_order (with model.moe.capacity=on)",
    "model.moe.balance_loss": "model.moe.balance.loss (model.moe.balance=none: no balance loss)",
    "model.moe.balance_coef": "model.moe.balance.coef (model.moe.balance=none: no balance loss)",
}
