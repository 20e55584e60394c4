"""Model configs, presets and the two model families.

>>> from transformer_jax.models import DecoderLM, get_preset
>>> model = DecoderLM(get_preset("llama_tiny"), rngs=nnx.Rngs(0))
>>> logits_BTV, aux = model(tokens_BT)
"""

from transformer_jax.models.baselines.config import BaselineConfig, baseline_model_config
from transformer_jax.models.baselines.ngram import NGramLM
from transformer_jax.models.baselines.rnn import RNNLM
from transformer_jax.models.baselines.window import WindowLM
from transformer_jax.models.config import MODELS, ModelConfig
from transformer_jax.models.decoder_lm import DecoderLM
from transformer_jax.models.encoder_decoder import EncoderDecoder
from transformer_jax.models.presets import PRESETS, get_preset
from transformer_jax.models.util import build_model, count_params, abstract_model

__all__ = ["MODELS", "ModelConfig", "DecoderLM", "EncoderDecoder", "PRESETS", "get_preset", "build_model",
           "count_params", "abstract_model", "BaselineConfig", "baseline_model_config", "NGramLM", "RNNLM",
           "WindowLM"]
