"""Every config class (every `configlib.Config` subclass of the package) refuses, field by field,
what the field's annotation or declared `Rule` says it must refuse, with a ``ConfigError`` that
names the dotted field (``PATH.field``): NaN and +-inf for floats (unless the rule lets a float be
inf), non-integers and bools for ints, strings for numbers, non-bools for bools and non-strings for
strings; a value just past each declared bound; a name outside a declared choice or a ``Literal``.

The classes come from importing every module of the package, so a config class added anywhere is
checked without being listed here (`test_the_converted_classes_are_all_found` guards against an
empty list).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from typing import Any, cast

import pytest

import transformer_jax
from transformer_jax.core.configlib import (
    Config,
    ConfigError,
    Rule,
    _group_fields,
    _scalar_fields,
    all_config_classes,
    literal_fields,
)

# Modules that may fail to import only because an optional extra is missing (the import error
# names a module outside the package); anything else failing to import is a test failure.
_OPTIONAL = ("torch", "transformers", "wandb", "tensorboard", "tensorboardX", "lm_eval", "datasets",
             "tensorflow", "tensorflow_datasets", "sentencepiece", "pyarrow", "array_record")  # fmt: skip


def _import_everything() -> list[str]:
    """Imports every module of the package; returns the ones skipped for a missing optional extra."""
    skipped = []
    for info in pkgutil.walk_packages(transformer_jax.__path__, "transformer_jax."):
        if info.name.rpartition(".")[2] == "__main__":  # runs the command line when imported
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            missing = (e.name or "").split(".")[0]
            if missing not in _OPTIONAL:
                raise
            skipped.append(f"{info.name} (needs {missing})")
    return skipped


SKIPPED = _import_everything()

# A minimal valid instance of a class whose fields are not all defaulted.
REQUIRED: dict[str, dict[str, Any]] = {
    "PrepareConfig": {"inputs": ("corpus.txt",), "out": "prepared-out-that-does-not-exist", "tokenizer": "char"},
}

# At least these must be found (the position encodings' and RoPE scalings' settings too, by class).
CONVERTED = {
    "model": "ModelConfig",
    "model.execution": "ExecutionConfig",
    "data": "DataConfig",
    "prepare": "PrepareConfig",
    "train": "TrainConfig",
    "train.optim": "OptimConfig",
    "train.lora": "LoraConfig",
    "train.eval": "EvalConfig",
    "train.log": "LogConfig",
    "train.log.wandb": "WandbConfig",
    "train.checkpoint": "CheckpointConfig",
    "train.checkpoint.best": "BestCheckpoint",
    "train.sample": "SampleConfig",
    "mesh": "MeshConfig",
    "translate": "TranslateConfig",
    "model.moe": "MoEConfig",
    "model.mla": "MLAConfig",
    "model.mtp": "MTPConfig",
}


def _concrete(cls: type[Config]) -> bool:
    return dataclasses.is_dataclass(cls) and bool(cls.PATH)  # the bases (Variant, a family base) have no PATH


CLASSES = [cls for cls in all_config_classes() if _concrete(cls)]


def _fields(cls: type[Config]) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cast(Any, cls))


def _base(cls: type[Config]) -> dict[str, Any]:
    return dict(REQUIRED.get(cls.__name__, {}))


def _just_outside(rule: Rule, kind: type) -> list[Any]:
    """A value just past each bound of ``rule`` (of the field's type), and a name not in its choice."""
    if rule.choice is not None:
        return ["no-such-name"]
    out = []
    for bound, direction in ((rule.ge, -1), (rule.gt, 0), (rule.le, 1), (rule.lt, 0)):
        if bound is None:
            continue
        if kind is int:
            if direction == 0:
                out.append(int(bound))
            else:
                out.append(math.ceil(bound) - 1 if direction < 0 else math.floor(bound) + 1)
        elif direction == 0:
            out.append(float(bound))
        else:
            out.append(math.nextafter(float(bound), direction * math.inf))
    return out


def _bad_values(f: dataclasses.Field, kind: type) -> list[Any]:
    rule = f.metadata.get("rule", Rule())
    bad: list[Any] = {
        int: [1.5, True, "x"],
        float: [math.nan, "x"] + ([math.inf, -math.inf] if rule.finite else []),
        bool: [3],
        str: [3],
    }[kind]
    return bad + _just_outside(rule, kind)


def _cases():
    for cls in CLASSES:
        fields = {f.name: f for f in _fields(cls)}
        for name, kind, _ in _scalar_fields(cls):
            for bad in _bad_values(fields[name], kind):
                yield pytest.param(cls, name, bad, id=f"{cls.PATH}.{name}={bad!r}")
        for name, _ in literal_fields(cls):  # a closed choice: a name outside it, a wrong type
            for bad in ("no-such-name", 3):
                yield pytest.param(cls, name, bad, id=f"{cls.PATH}.{name}={bad!r}")
        for name, _, _ in _group_fields(cls):  # a settings group or variant: not an instance of it
            for bad in ("no-such-name", 3, False):
                yield pytest.param(cls, name, bad, id=f"{cls.PATH}.{name}={bad!r}")


def test_defaults_are_valid():
    for cls in CLASSES:
        cls(**_base(cls))


def test_the_converted_classes_are_all_found():
    found = {cls.PATH: cls.__name__ for cls in CLASSES}
    missing = {path: name for path, name in CONVERTED.items() if found.get(path) != name}
    assert not missing, f"config classes not found (skipped modules: {SKIPPED})"
    names = {cls.__name__ for cls in CLASSES}
    assert {"RopePositions", "RelativeBiasPositions", "YarnScaling", "Llama3Scaling"} <= names
    assert {"Greedy", "Sample", "TopK", "TopP", "Beam", "Sampled"} <= names
    assert {"Adam", "AdamW", "Sgd", "Muon", "CosineSchedule", "LinearSchedule", "InverseSqrtSchedule"} <= names
    assert {"NgramConfig", "WindowLMConfig", "RNNLMConfig", "KneserNeySmoothing", "AddKSmoothing", "LSTMCellConfig",
            "GRUCellConfig"} <= names  # fmt: skip
    assert len(list(_cases())) > 200


@pytest.mark.parametrize(("cls", "name", "bad"), list(_cases()))
def test_a_value_the_field_refuses_is_refused_naming_it(cls, name, bad):
    with pytest.raises(ConfigError) as e:
        cls(**{**_base(cls), name: bad})
    assert f"{cls.PATH}.{name}" in str(e.value)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.PATH)
def test_a_value_on_a_bound_is_accepted(cls):
    """The bounds are the ones declared: a value exactly on an inclusive bound passes the field's
    own check (a cross-field rule may still refuse it, but then it names another reason)."""
    for f in _fields(cls):
        rule = f.metadata.get("rule")
        if rule is None or rule.choice is not None:
            continue
        for bound in (rule.ge, rule.le):
            if bound is None:
                continue
            kind = next(k for n, k, _ in _scalar_fields(cls) if n == f.name)
            value = kind(bound)
            try:
                cls(**{**_base(cls), f.name: value})
            except ConfigError as e:
                assert f"{cls.PATH}.{f.name}={value!r}: must be" not in str(e), str(e)


def test_a_broken_bound_says_what_to_do_instead_where_the_field_declares_it():
    from transformer_jax.decode.strategies import Sample
    from transformer_jax.train.optim_config import OptimConfig

    with pytest.raises(ConfigError, match=r"train.optim.grad_clip=0.0: must be > 0.0; none turns clipping off"):
        OptimConfig(grad_clip=0.0)
    greedy = r"temperature 0 is greedy decoding: use Greedy\(\) \(--strategy greedy\)"
    with pytest.raises(ConfigError, match=r"must be > 0.0; " + greedy):
        Sample(temperature=0.0)
