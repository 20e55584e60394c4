"""``model.moe.first_dense`` (DeepSeek-V3's ``first_k_dense_replace``): the first k layers keep the
dense FFN of width d_ff, later ones hold experts; ``model.moe.router.scaling_factor`` reaches the
layers; what cannot work is refused by name."""

from __future__ import annotations

import dataclasses

import pytest
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.models.config import with_changes
from transformer_jax.models.presets import get_preset
from transformer_jax.models.util import abstract_model
from transformer_jax.nn.moe import MoE
from transformer_jax.nn.moe_config import SigmoidRouter


def _cfg(**moe):
    base = get_preset("deepseek_v3_tiny", n_layers=3)
    assert base.moe is not None
    return dataclasses.replace(base, moe=dataclasses.replace(base.moe, **moe))


def test_the_first_layers_are_dense_and_the_rest_routed_with_the_scaling_factor():
    base = _cfg()
    assert base.moe is not None
    model = abstract_model(_cfg(first_dense=2, router=dataclasses.replace(base.moe.router, scaling_factor=2.5)))
    ffns = [layer.ffn for layer in model.layers.layers]  # type: ignore[attr-defined]
    assert [isinstance(f, MoE) for f in ffns] == [False, False, True]
    assert ffns[0].w_in.kernel.shape == (64, model.cfg.dims.resolved_d_ff)  # type: ignore[attr-defined]
    assert ffns[2].spec.router.scaling_factor == 2.5
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(model))}
    assert "layers.layers.1.ffn.router.kernel" not in names and "layers.layers.2.ffn.router.kernel" in names


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(first_dense=-1), "model.moe.first_dense=-1"),
        (dict(router=lambda: SigmoidRouter(scaling_factor=0.0)), "model.moe.router.scaling_factor=0.0"),
        (dict(first_dense=3), "model.moe.first_dense=3: leaves a stack without MoE layers"),
        (dict(first_dense=2, every=2), "model.moe.first_dense=2: leaves a stack without MoE layers"),
    ],
)
def test_bad_values_are_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**{k: v() if callable(v) else v for k, v in change.items()})


def test_dense_first_layers_refuse_a_scanned_stack():
    with pytest.raises(ConfigError, match=r"model\.moe\.first_dense=1: .*scan_layers=True"):
        with_changes(_cfg(first_dense=1), scan_layers=True)
