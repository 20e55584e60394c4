"""The optimizer section's renamed keys: ``train.optim.optimizer`` and ``train.optim.schedule`` became
one settings class per choice (were: a name each plus every choice's fields side by side).

Each step is an (upgrade, legacy) pair acting in place on the section's dict (see the package doc)."""

from __future__ import annotations

from typing import Any

# The flat fields of the old layout and their defaults (the committed runs were saved with all of them).
_OLD_DEFAULTS: dict[str, Any] = {
    "min_lr": 1e-4,
    "decay_steps": None,
    "b1": 0.9,
    "b2": 0.99,
    "eps": 1e-8,
    "weight_decay": 0.1,
    "momentum": 0.9,
    "nesterov": False,
    "decay_exclude": ["norm", "bias", "embedding"],
    "d_model": None,
    "adam_lr": None,
    "muon_momentum": 0.95,
    "muon_ns_steps": 5,
    "muon_rms": None,
}
_ADAM = ("b1", "b2", "eps")
_DECAY = ("weight_decay", "decay_exclude")
_MUON = {"muon_momentum": "momentum", "muon_ns_steps": "ns_steps", "muon_rms": "rms", "adam_lr": "adam_lr"}
# old field -> its name in the settings of each choice that reads it
_OPTIMIZER_READS: dict[str, dict[str, str]] = {
    "adam": {name: name for name in _ADAM},
    "adamw": {name: name for name in (*_ADAM, *_DECAY)},
    "sgd": {name: name for name in ("momentum", "nesterov", *_DECAY)},
    "muon": {**_MUON, **{name: name for name in (*_ADAM, *_DECAY)}},
}
_SCHEDULE_READS: dict[str, tuple[str, ...]] = {
    "cosine": ("min_lr", "decay_steps"),
    "linear": ("min_lr", "decay_steps"),
    "constant": (),
    "inverse_sqrt": ("d_model",),
}


def _upgrade(optim: dict[str, Any]) -> None:
    if not isinstance(optim.get("optimizer"), str) and not isinstance(optim.get("schedule"), str):
        return
    old = {name: optim.pop(name, default) for name, default in _OLD_DEFAULTS.items()}
    if isinstance(optim.get("optimizer"), str):
        kind = optim["optimizer"]
        optim["optimizer"] = {"kind": kind, **{ours: old[theirs] for theirs, ours in _OPTIMIZER_READS[kind].items()}}
    if isinstance(optim.get("schedule"), str):
        kind = optim["schedule"]
        optim["schedule"] = {"kind": kind, **{name: old[name] for name in _SCHEDULE_READS[kind]}}


def _legacy(optim: dict[str, Any]) -> None:
    if not isinstance(optim.get("optimizer"), dict) or not isinstance(optim.get("schedule"), dict):
        return
    optimizer, schedule = dict(optim.pop("optimizer")), dict(optim.pop("schedule"))
    old = {name: list(value) if isinstance(value, list) else value for name, value in _OLD_DEFAULTS.items()}
    old.update({theirs: optimizer[ours] for theirs, ours in _OPTIMIZER_READS[optimizer["kind"]].items()})
    old.update({name: schedule[name] for name in _SCHEDULE_READS[schedule["kind"]]})
    optim.update(optimizer=optimizer["kind"], schedule=schedule["kind"], **old)


PATH = ("train", "optim")
STEPS = ((_upgrade, _legacy),)

_WHO_READS = {
    "b1": "adam, adamw or muon",
    "b2": "adam, adamw or muon",
    "eps": "adam, adamw or muon",
    "weight_decay": "adamw, sgd or muon",
    "decay_exclude": "adamw, sgd or muon",
    "momentum": "sgd",
    "nesterov": "sgd",
}
RENAMED: dict[str, str] = {
    **{
        f"train.optim.{name}": f"train.optim.optimizer.{name} (with train.optim.optimizer={who})"
        for name, who in _WHO_READS.items()
    },
    **{
        f"train.optim.{old}": f"train.optim.optimizer.{new} (with train.optim.optimizer=muon)"
        for old, new in _MUON.items()
    },
    "train.optim.min_lr": "train.optim.schedule.min_lr (with train.optim.schedule=cosine or linear)",
    "train.optim.decay_steps": "train.optim.schedule.decay_steps (with train.optim.schedule=cosine or linear)",
    "train.optim.d_model": "train.optim.schedule.d_model (with train.optim.schedule=inverse_sqrt)",
}
