"""Hugging Face checkpoints in and out: safetensors + config.json <-> ModelConfig + DecoderLM.

    from transformer_jax.models.hf import from_pretrained, save_pretrained
    cfg, model = from_pretrained("path/to/Llama-3.2-1B", dtype="bfloat16")
    save_pretrained(model, "out/")        # loadable by transformers.AutoModelForCausalLM

One module per family (``gpt2``, ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``qwen3_moe``,
``mixtral``, ``gemma2``, ``gemma3``, ``deepseek_v2``, ``deepseek_v3``), each a config mapping and a parameter-name
mapping both ways, registered in ``FAMILIES`` by ``model_type``. Tensors are read with numpy
(bfloat16 through ``ml_dtypes``), one at a time, and placed straight onto their devices or
shardings; torch is never imported.
"""

from transformer_jax.models.hf import (  # noqa: F401 (registers)
    deepseek_v2,
    deepseek_v3,
    gemma2,
    gemma3,
    gpt2,
    llama,
    mistral,
    mixtral,
    qwen2,
    qwen3,
    qwen3_moe,
)
from transformer_jax.models.hf.configs import config_from_hf, config_to_hf, family_of
from transformer_jax.models.hf.load import from_pretrained, load_params, load_state_dict, read_hf_config
from transformer_jax.models.hf.safetensors_io import CheckpointReader, read_header, write_safetensors
from transformer_jax.models.hf.save import PretrainedTokenizer, save_pretrained
from transformer_jax.models.hf.spec import FAMILIES, ConfigReader, Family, Link

__all__ = [
    "FAMILIES",
    "CheckpointReader",
    "ConfigReader",
    "Family",
    "Link",
    "PretrainedTokenizer",
    "config_from_hf",
    "config_to_hf",
    "family_of",
    "from_pretrained",
    "load_params",
    "load_state_dict",
    "read_header",
    "read_hf_config",
    "save_pretrained",
    "write_safetensors",
]
