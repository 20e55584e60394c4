"""Invalid model configurations raise errors that name the field."""

import dataclasses

import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import ModelConfig, RopePositions, get_preset
from transformer_jax.models.config import with_changes
from transformer_jax.nn.norm_config import LayerNormConfig
from transformer_jax.train.config import Config

INVALID = [
    (dict(d_model=100, n_heads=8), "model.dims.d_model", "divisible"),
    (dict(n_heads=8, n_kv_heads=3, d_model=64), "model.dims.n_kv_heads", "divide"),
    (dict(position="rope", d_model=36, n_heads=4), "model.dims.head_dim", "even"),
    (dict(placement="psot"), "model.placement", "post"),
    (dict(position="sinusodal"), "model.position", "sinusoidal"),
    (dict(norm="batchnorm"), "model.norm", "layernorm"),
    (dict(ffn="swish"), "model.ffn", "swiglu"),
    (dict(attention_impl="flash"), "model.execution.attention_impl", "chunked"),
    (dict(attention="sliding_windw"), "model.attention", "sliding_window"),
    (dict(kind="encoder_decoder", n_encoder_layers=0), "model.dims.n_encoder_layers", "encoder"),
    (dict(n_encoder_layers=2), "model.dims.n_encoder_layers", "encoder_decoder"),
    (dict(dropout=1.5), "model.dropout", "< 1"),
    (dict(vocab_size=0), "model.dims.vocab_size", ">= 2"),
    (dict(n_layers=0), "model.dims.n_layers", ">= 1"),
    (dict(attention="linear", position="alibi"), "model.position", "linear attention"),
    (dict(dtype="float64"), "model.execution.dtype", "bfloat16"),
    (dict(remat="sometimes"), "model.execution.remat", "save_dots"),
    (dict(kind="encoder_only"), "model.kind", "decoder_lm"),
]


@pytest.mark.parametrize("kwargs,field,hint", INVALID, ids=[f[1] + ":" + str(i) for i, f in enumerate(INVALID)])
def test_invalid_config_names_field(kwargs, field, hint):
    with pytest.raises(ConfigError) as err:
        with_changes(ModelConfig(), **kwargs)
    message = str(err.value)
    assert message.startswith(field + "="), message
    assert hint in message, message


@pytest.mark.parametrize(
    "sets,field,hint",
    [
        (["position=rope", "position.scaling=yarnn"], "position.scaling", "yarn"),
        (
            ["position=rope", "position.scaling=linear", "position.scaling.factor=0.5"],
            "model.position.scaling.factor",
            ">= 1",
        ),
        (["position=rope", "position.theta=nan"], "model.position.theta", "finite"),
        (["position=relative_bias", "position.buckets=0"], "model.position.buckets", ">= 1"),
        (["norm.eps=0"], "model.norm.eps", "> 0"),
    ],
)
def test_invalid_position_settings_name_the_nested_field(sets, field, hint):
    with pytest.raises(ConfigError) as err:
        apply_overrides(ModelConfig(), sets)
    message = str(err.value)
    assert message.startswith(field + "="), message
    assert hint in message, message


def test_position_settings_exist_only_on_their_encoding():
    with pytest.raises(ConfigError, match="'learned' has no setting 'theta'.*--set position=rope"):
        apply_overrides(ModelConfig(), ["position.theta=5e5"])
    with pytest.raises(ConfigError, match="was renamed: model.position.theta"):
        apply_overrides(Config(), ["model.rope_theta=5e5"])
    kept = apply_overrides(ModelConfig(), ["position=rope", "position.theta=5e5", "position=rope"])
    assert kept.position == RopePositions(theta=5e5)  # choosing the chosen encoding keeps its settings


def test_a_bias_exists_only_on_the_norm_that_has_one():
    with pytest.raises(ConfigError, match="'rmsnorm' has no setting 'bias'.*--set norm=layernorm"):
        apply_overrides(ModelConfig(), ["norm=rmsnorm", "norm.bias=false"])
    kept = apply_overrides(ModelConfig(), ["norm.eps=1e-6", "norm=layernorm"])
    assert kept.norm == LayerNormConfig(eps=1e-6)


def test_presets_are_valid_and_overridable():
    cfg = get_preset("llama_tiny", n_layers=3)
    assert cfg.dims.n_layers == 3 and cfg.position == RopePositions()
    with pytest.raises(ConfigError, match="model.dims.n_kv_heads"):
        get_preset("llama_tiny", n_kv_heads=3)


@dataclasses.dataclass(frozen=True)
class _Outer:
    model: ModelConfig = ModelConfig()
    steps: int = 10


def test_overrides_parse_types_and_suggest_names():
    cfg = apply_overrides(
        _Outer(),
        [
            "model.dims.n_layers=8",
            "model.attention.scale=None",
            "steps=1_000",
            "model.use_bias=false",
            "model.dropout=0.25",
        ],
    )
    assert cfg.model.dims.n_layers == 8 and cfg.steps == 1000 and cfg.model.use_bias is False
    assert cfg.model.dropout == 0.25
    with pytest.raises(ConfigError, match="model.dims.n_layers"):
        apply_overrides(_Outer(), ["model.n_layer=8"])
    with pytest.raises(ConfigError, match="expected an integer"):
        apply_overrides(_Outer(), ["model.dims.n_layers=eight"])
    with pytest.raises(ConfigError, match="model.dims.d_model"):
        apply_overrides(_Outer(), ["model.dims.d_model=100", "model.dims.n_heads=8"])
