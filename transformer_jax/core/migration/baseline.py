"""The model section's baseline settings: ``model.baseline`` became one settings class per baseline
kind, with the n-gram's smoothing and the RNN's cell nested (were: the fields of every baseline kind
side by side, the flat layout below).

Each step is an (upgrade, legacy) pair acting in place on the section's dict (see the package doc); it
runs after the `model` module's steps (and its legacy before theirs).
"""

from __future__ import annotations

from typing import Any

_OLD_BASELINE_DEFAULTS: dict[str, Any] = {
    "ngram_order": 3,
    "smoothing": "kneser_ney",
    "discount": None,
    "add_k": 1.0,
    "window": 8,
    "direct": False,
    "cell": "lstm",
    "tbptt": None,
    "forget_bias": 1.0,
}
_UNKNOWN = object()
_BASELINE_OWN = {"ngram": ("ngram_order",), "window_lm": ("window", "direct"), "rnn_lm": ("tbptt",)}
# kind -> (its nested choice, {choice: {old field: the choice's field}})
_BASELINE_NESTED = {
    "ngram": ("smoothing", {"kneser_ney": {"discount": "discount"}, "add_k": {"add_k": "k"}}),
    "rnn_lm": ("cell", {"lstm": {"forget_bias": "forget_bias"}, "gru": {}}),
}


def _upgrade_baseline(model: dict[str, Any]) -> None:
    baseline = model.get("baseline")
    if not isinstance(baseline, dict) or "kind" in baseline:
        return
    old = dict(_OLD_BASELINE_DEFAULTS)
    old.update(baseline)
    kind = model.get("kind", "decoder_lm")
    new: dict[str, Any] = {"kind": kind, **{name: old[name] for name in _BASELINE_OWN.get(kind, ())}}
    used = set(_BASELINE_OWN.get(kind, ()))
    if kind in _BASELINE_NESTED:
        choice, choices = _BASELINE_NESTED[kind]
        fields = choices.get(old[choice], {})
        new[choice] = {"kind": old[choice], **{ours: old[theirs] for theirs, ours in fields.items()}}
        used |= {choice, *fields}
    # set but not read by the kind: loading refuses them, naming them
    stray = {k: v for k, v in old.items() if k not in used and v != _OLD_BASELINE_DEFAULTS.get(k, _UNKNOWN)}
    new.update(stray)
    model["baseline"] = new


def _legacy_baseline(model: dict[str, Any]) -> None:
    new = model.get("baseline")
    if not isinstance(new, dict) or "kind" not in new:
        return
    new = dict(new)
    kind = new.pop("kind")
    old = dict(_OLD_BASELINE_DEFAULTS)
    old.update({name: new[name] for name in _BASELINE_OWN.get(kind, ()) if name in new})
    if kind in _BASELINE_NESTED and isinstance(new.get(_BASELINE_NESTED[kind][0]), dict):
        choice, choices = _BASELINE_NESTED[kind]
        nested = new[choice]
        old[choice] = nested["kind"]
        fields = choices.get(nested["kind"], {})
        old.update({theirs: nested[ours] for theirs, ours in fields.items() if ours in nested})
    model["baseline"] = old


PATH = ("model",)
STEPS = ((_upgrade_baseline, _legacy_baseline),)

RENAMED: dict[str, str] = {
    "model.baseline.discount": "model.baseline.smoothing.discount (with model.baseline.smoothing=kneser_ney)",
    "model.baseline.add_k": "model.baseline.smoothing.k (with model.baseline.smoothing=add_k)",
    "model.baseline.forget_bias": "model.baseline.cell.forget_bias (with model.baseline.cell=lstm)",
}
