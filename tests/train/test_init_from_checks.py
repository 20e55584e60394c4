"""``--init-from``: the model may change only in its runtime settings, and the error names the
``--set`` key that changed it."""

import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.models import ModelConfig, with_changes
from transformer_jax.train.pretrained import check_model


def test_a_set_key_that_changes_the_pretrained_model_is_named():
    base = ModelConfig()
    changed = with_changes(base, n_layers=2)
    with pytest.raises(ConfigError, match=r"--set model.dims.n_layers=2: conflicts with the pretrained model"):
        check_model(changed, "/base", pretrained=base, explicit={"model.dims.n_layers": "2", "train.steps": "5"})
    with pytest.raises(ConfigError, match=r"model.dims.n_layers=2 differs from the pretrained model's 4 \(/base\)"):
        check_model(changed, "/base", pretrained=base)
    runtime = with_changes(base, dtype="bfloat16", dropout=0.1)
    check_model(runtime, "/base", pretrained=base, explicit={"model.execution.dtype": "bfloat16"})
