"""Model configs, presets and the two model families.

>>> from transformer_jax.models import DecoderLM, get_preset
>>> model = DecoderLM(get_preset("llama_tiny"), rngs=nnx.Rngs(0))
>>> logits_BTV, aux = model(tokens_BT)
"""

from transformer_jax.models.baselines.config import (
    AddKSmoothing,
    BaselineConfig,
    GRUCellConfig,
    KneserNeySmoothing,
    LSTMCellConfig,
    NgramConfig,
    RNNCellConfig,
    RNNLMConfig,
    SmoothingConfig,
    WindowLMConfig,
)
from transformer_jax.models.baselines.ngram import NGramLM
from transformer_jax.models.baselines.rnn import RNNLM
from transformer_jax.models.baselines.window import WindowLM
from transformer_jax.models.config import ModelConfig, with_changes
from transformer_jax.models.decoder_lm import DecoderLM
from transformer_jax.models.dims_config import ModelDims
from transformer_jax.models.encoder_decoder import EncoderDecoder
from transformer_jax.models.kinds import MODELS
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.presets import PRESETS, baseline_model_config, get_preset
from transformer_jax.models.util import abstract_model, build_model, count_active_params, count_params
from transformer_jax.nn.attention_config import (
    AttentionConfig,
    LinearAttention,
    LocalGlobalAttention,
    SlidingWindowAttention,
    SoftmaxAttention,
)
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitConfig
from transformer_jax.nn.moe_config import (
    BalanceLossConfig,
    CapacityConfig,
    ExpertGroupsConfig,
    RouterConfig,
    SigmoidRouter,
    SoftmaxRouter,
)
from transformer_jax.nn.norm_config import LayerNormConfig, NormConfig, RMSNormConfig, RMSNormPlusOneConfig
from transformer_jax.nn.position_config import (
    AlibiPositions,
    LearnedPositions,
    LinearScaling,
    Llama3Scaling,
    NoPositions,
    NtkScaling,
    PositionConfig,
    RelativeBiasPositions,
    RopePositions,
    SinusoidalPositions,
    YarnScaling,
)

__all__ = [
    "MODELS",
    "PRESETS",
    "RNNLM",
    "AddKSmoothing",
    "AlibiPositions",
    "AttentionConfig",
    "BalanceLossConfig",
    "BaselineConfig",
    "CapacityConfig",
    "DecoderLM",
    "EmbeddingsConfig",
    "EncoderDecoder",
    "ExecutionConfig",
    "ExpertGroupsConfig",
    "GRUCellConfig",
    "InitConfig",
    "KneserNeySmoothing",
    "LSTMCellConfig",
    "LayerNormConfig",
    "LearnedPositions",
    "LinearAttention",
    "LinearScaling",
    "Llama3Scaling",
    "LocalGlobalAttention",
    "MoEConfig",
    "ModelConfig",
    "ModelDims",
    "NGramLM",
    "NgramConfig",
    "NoPositions",
    "NormConfig",
    "NtkScaling",
    "PositionConfig",
    "RMSNormConfig",
    "RMSNormPlusOneConfig",
    "RNNCellConfig",
    "RNNLMConfig",
    "RelativeBiasPositions",
    "RopePositions",
    "RouterConfig",
    "SigmoidRouter",
    "SinusoidalPositions",
    "SlidingWindowAttention",
    "SmoothingConfig",
    "SoftmaxAttention",
    "SoftmaxRouter",
    "WindowLM",
    "WindowLMConfig",
    "YarnScaling",
    "abstract_model",
    "baseline_model_config",
    "build_model",
    "count_active_params",
    "count_params",
    "get_preset",
    "with_changes",
]
