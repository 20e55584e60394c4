"""The train section's renamed keys: the periodic actions' settings became groups beside the actions
(eval, log, checkpoint, sample), the loss's extras a group (loss) and the non-finite policy one class per policy.

Each step is an (upgrade, legacy) pair acting in place on the section's dict (see the package doc)."""

from __future__ import annotations

from typing import Any

# train.<group>.<new>: (old flat key, its default), the defaults of the layout the committed runs hold.
_GROUPS: dict[str, dict[str, tuple[str, Any]]] = {
    "eval": {"every": ("eval_every", 250), "batches": ("eval_batches", 50), "extra": ("extra_eval", True)},
    "sample": {"every": ("sample_every", 0), "tokens": ("sample_tokens", 200), "prompt": ("sample_prompt", "\n")},
    "log": {
        "every": ("log_every", 10),
        "loggers": ("loggers", ["jsonl", "tensorboard"]),
        "peak_flops": ("peak_flops", None),
        "per_layer_grad_norms": ("per_layer_grad_norms", True),
    },
    "checkpoint": {"every": ("checkpoint_every", 500), "keep": ("keep_checkpoints", 3)},
    "loss": {"label_smoothing": ("label_smoothing", 0.0), "z_loss": ("z_loss", 0.0)},
}
_WANDB = {"project": ("wandb_project", "transformer-jax"), "entity": ("wandb_entity", None)}
_BEST = {"metric": ("best_metric", "loss"), "mode": ("best_mode", "min")}
_MAX_SKIPS = ("max_consecutive_skips", 10)


def _upgrade_groups(train: dict[str, Any]) -> None:
    for group, fields in _GROUPS.items():
        if isinstance(train.get(group), dict) or not any(old in train for old, _ in fields.values()):
            continue
        train[group] = {new: train.pop(old) for new, (old, _) in fields.items() if old in train}


def _legacy_groups(train: dict[str, Any]) -> None:
    for group, fields in _GROUPS.items():
        if isinstance(train.get(group), dict):
            values = train.pop(group)
            train.update({old: values.get(new, default) for new, (old, default) in fields.items()})


def _upgrade_wandb(train: dict[str, Any]) -> None:
    """The old ``wandb_*`` keys go: their values into ``log.wandb`` when ``wandb`` was a logger."""
    if not any(old in train for old, _ in _WANDB.values()) and "wandb" not in train.get("log", {}).get("loggers", ()):
        return
    old = {new: train.pop(key, default) for new, (key, default) in _WANDB.items()}
    log = train.setdefault("log", {})
    loggers = list(log.get("loggers", _GROUPS["log"]["loggers"][1]))
    if "wandb" in loggers:
        log["loggers"] = [name for name in loggers if name != "wandb"]
        log["wandb"] = old


def _legacy_wandb(train: dict[str, Any]) -> None:
    log = train.get("log")
    if not isinstance(log, dict) or "wandb" not in log:
        return
    wandb = log.pop("wandb")
    if wandb is not None:
        log["loggers"] = [*log.get("loggers", _GROUPS["log"]["loggers"][1]), "wandb"]
    train.update({old: (wandb or {}).get(new, default) for new, (old, default) in _WANDB.items()})


def _upgrade_best(train: dict[str, Any]) -> None:
    if "keep_best" not in train and not any(old in train for old, _ in _BEST.values()):
        return
    best = {new: train.pop(old, default) for new, (old, default) in _BEST.items()}
    train.setdefault("checkpoint", {})["best"] = best if train.pop("keep_best", True) else None


def _legacy_best(train: dict[str, Any]) -> None:
    checkpoint = train.get("checkpoint")
    if not isinstance(checkpoint, dict) or "best" not in checkpoint:
        return
    best = checkpoint.pop("best")
    train["keep_best"] = best is not None
    train.update({old: (best or {}).get(new, default) for new, (old, default) in _BEST.items()})


def _upgrade_nonfinite(train: dict[str, Any]) -> None:
    if isinstance(train.get("nonfinite"), dict) or ("nonfinite" not in train and _MAX_SKIPS[0] not in train):
        return
    kind = train.pop("nonfinite", "skip")
    skips = train.pop(*_MAX_SKIPS)
    train["nonfinite"] = {"kind": kind, "max_consecutive": skips} if kind == "skip" else {"kind": kind}


def _legacy_nonfinite(train: dict[str, Any]) -> None:
    if not isinstance(train.get("nonfinite"), dict):
        return
    policy = train.pop("nonfinite")
    train["nonfinite"] = policy["kind"]
    train[_MAX_SKIPS[0]] = policy.get("max_consecutive", _MAX_SKIPS[1])


PATH = ("train",)
STEPS = (
    (_upgrade_groups, _legacy_groups),
    (_upgrade_wandb, _legacy_wandb),
    (_upgrade_best, _legacy_best),
    (_upgrade_nonfinite, _legacy_nonfinite),
)

RENAMED: dict[str, str] = {
    **{f"train.{old}": f"train.{group}.{new}" for group, fields in _GROUPS.items() for new, (old, _) in fields.items()},
    "train.loggers": "train.log.loggers (jsonl, tensorboard; the wandb logger: train.log.wandb=on)",
    **{f"train.{old}": f"train.log.wandb.{new} (with train.log.wandb=on)" for new, (old, _) in _WANDB.items()},
    "train.keep_best": "train.checkpoint.best (none: no best checkpoint)",
    **{f"train.{old}": f"train.checkpoint.best.{new}" for new, (old, _) in _BEST.items()},
    "train.max_consecutive_skips": "train.nonfinite.max_consecutive (with train.nonfinite=skip)",
}
