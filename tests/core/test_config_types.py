"""Every config class refuses NaN, inf, bools for numbers, non-integers for integers and wrong
types, with a message that names the field (`core.configlib.check_types`)."""

import dataclasses
import math

import pytest

from transformer_jax.core.configlib import ConfigError, _scalar_fields
from transformer_jax.data import DataConfig
from transformer_jax.decode.strategies import TopK
from transformer_jax.models import ModelConfig, ModelDims
from transformer_jax.models.lora import LoraConfig
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.nn.attention_config import LocalGlobalAttention
from transformer_jax.nn.init import InitConfig
from transformer_jax.nn.moe_config import BalanceLossConfig
from transformer_jax.nn.norm_config import LayerNormConfig
from transformer_jax.parallel import MeshConfig
from transformer_jax.train.config import TrainConfig
from transformer_jax.train.optim import OptimConfig

CONFIGS = {
    "model": ModelConfig(),
    "model.dims": ModelDims(),
    "model.attention": LocalGlobalAttention(),
    "model.moe": MoEConfig(),
    "model.mla": MLAConfig(),
    "model.mtp": MTPConfig(),
    "train": TrainConfig(),
    "train.optim": OptimConfig(),
    "data": DataConfig(),
    "mesh": MeshConfig(),
    "sample": TopK(),
    "train.lora": LoraConfig(),
}
BAD = {
    int: (2.5, True, "3", math.nan),
    float: (math.nan, math.inf, -math.inf, True, "0.1"),
    bool: (1, "yes"),
    str: (3,),
}
CASES = [
    pytest.param(prefix, name, bad, id=f"{prefix}.{name}={bad!r}")
    for prefix, cfg in CONFIGS.items()
    for name, kind, _ in _scalar_fields(type(cfg))
    for bad in BAD[kind]
]


@pytest.mark.parametrize(("prefix", "name", "bad"), CASES)
def test_a_wrong_value_is_refused_naming_the_field(prefix, name, bad):
    with pytest.raises(ConfigError, match=rf"^{prefix}\.{name}="):
        dataclasses.replace(CONFIGS[prefix], **{name: bad})


def test_every_config_class_has_typed_scalar_fields_checked():
    """The enumeration above is not empty by accident (annotations read as strings)."""
    counts = {prefix: len(_scalar_fields(type(cfg))) for prefix, cfg in CONFIGS.items()}
    assert all(n >= 2 for n in counts.values()), counts
    assert counts["model.dims"] >= 9


def test_the_three_values_the_issue_found_are_refused():
    with pytest.raises(ConfigError, match=r"model\.init\.std=nan: must be a finite number"):
        ModelConfig(init=InitConfig(std=math.nan))
    with pytest.raises(ConfigError, match=r"model\.norm\.eps=nan: must be a finite number"):
        LayerNormConfig(eps=math.nan)  # model.norm_eps before the norm settings were a class per kind
    with pytest.raises(ConfigError, match=r"model\.moe\.balance\.coef=nan"):
        MoEConfig(balance=BalanceLossConfig(coef=math.nan))  # model.moe.balance_coef before the balance group
    with pytest.raises(ConfigError, match=r"model\.dims\.d_model=128\.5: must be an integer"):
        ModelConfig(dims=ModelDims(d_model=128.5, n_heads=1))
