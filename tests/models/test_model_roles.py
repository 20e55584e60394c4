"""Parameter roles from the model's metadata (`models.model_roles`): on every preset and baseline,
scanned or not, with LoRA adapters too, they equal the path rules (`param_roles.classify`) that
plain dicts fall back on; the rules on logical axes by themselves; a parameter without logical
axes is refused by name."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from transformer_jax.models import PRESETS, abstract_model, baseline_model_config, get_preset
from transformer_jax.models.baselines.config import BaselineConfig
from transformer_jax.models.lora import LoraConfig, apply_lora
from transformer_jax.models.model_roles import (
    BATCH_AXES,
    EMBED,
    NORM,
    POSITION_AXES,
    VOCAB,
    is_param_info,
    model_param_infos,
    model_param_roles,
    roles_from_axes,
)
from transformer_jax.models.param_roles import MatrixView, ParamInfo, path_names, role_table
from transformer_jax.parallel import LOGICAL_RULES

BASELINES = {
    "window": ("window_lm", {}),
    "window_direct": ("window_lm", {"direct": True}),
    "lstm": ("rnn_lm", {"cell": "lstm"}),
    "gru": ("rnn_lm", {"cell": "gru"}),
}


def _flat(infos) -> dict[str, ParamInfo]:
    leaves = jax.tree_util.tree_flatten_with_path(infos, is_leaf=is_param_info)[0]
    return {"/".join(path_names(p)): info for p, info in leaves}


def _assert_same_as_path_rules(model: nnx.Module) -> None:
    state = nnx.state(model, nnx.Param)
    from_paths, from_model = role_table(nnx.to_pure_dict(state)), _flat(model_param_infos(model))
    assert from_model.keys() == from_paths.keys()
    different = {k: (from_paths[k], from_model[k]) for k in from_paths if from_paths[k] != from_model[k]}
    assert not different


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("preset", PRESETS.names())
def test_every_preset_classifies_as_the_path_rules_did(preset, scan):
    _assert_same_as_path_rules(abstract_model(get_preset(preset, scan_layers=scan)))


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_baseline_classifies_as_the_path_rules_did(name):
    kind, baseline = BASELINES[name]
    cfg = baseline_model_config(kind, BaselineConfig.VARIANTS.get(kind)(**baseline), vocab_size=32, d_model=16, d_ff=32)
    _assert_same_as_path_rules(abstract_model(cfg))


@pytest.mark.parametrize("scan", [False, True])
def test_relative_bias_and_lora_adapters_classify_as_the_path_rules_did(scan):
    cfg = get_preset("llama_tiny", scan_layers=scan, position="relative_bias", d_model=32, n_heads=4, n_kv_heads=2)

    def build():
        from transformer_jax.models import build_model

        model = build_model(cfg)
        apply_lora(model, LoraConfig(rank=2, targets=("q", "k", "v", "o", "up", "gate", "down")))
        return model

    model = nnx.eval_shape(build)
    roles = set(jax.tree.leaves(model_param_roles(model)))
    assert {"adapter", "position", "hidden_matrix"} <= roles
    _assert_same_as_path_rules(model)


def test_the_axis_names_the_rules_read_are_the_sharding_rules_names():
    for name in (*BATCH_AXES, EMBED, VOCAB, NORM, *POSITION_AXES):
        assert name in LOGICAL_RULES, name


@pytest.mark.parametrize(
    "axes, kw, role, view",
    [
        (("vocab", "embed"), {}, "embedding", None),
        (("embed", "vocab"), {}, "head", None),
        (("mlp", "vocab"), {}, "head", None),
        (("max_len", "embed"), {}, "position", None),
        (("buckets", "heads"), {}, "position", None),
        (("embed", "experts"), {}, "router", None),
        (("layers", "embed", None), {"role": "router"}, "router", None),
        (("norm",), {}, "norm", None),
        (("layers", "norm"), {"role": "bias"}, "norm", None),
        (("mlp",), {}, "bias", None),
        ((), {}, "other", None),
        (("embed", "heads", "head_dim"), {}, "hidden_matrix", ((0,), (1, 2))),
        (("heads", "head_dim", "embed"), {}, "hidden_matrix", ((0, 1), (2,))),
        (("layers", "embed", "mlp"), {}, "hidden_matrix", ((1,), (2,))),
        ((None, "embed", "mlp"), {}, "hidden_matrix", ((0, 1), (2,))),
        ((None, None, "mlp"), {}, "hidden_matrix", ((0,), (1, 2))),
        (("experts", "embed", "mlp"), {}, "expert_matrix", ((1,), (2,))),
        (("layers", "experts", "mlp", "embed"), {}, "expert_matrix", ((2,), (3,))),
        (("embed", None), {"role": "adapter"}, "adapter", None),
    ],
)
def test_roles_from_logical_axes(axes, kw, role, view):
    info = roles_from_axes(axes, **kw)
    assert info.role == role
    assert info.view == (None if view is None else MatrixView(*view))


def test_decay_groups_from_axes_and_declared_roles():
    assert roles_from_axes(("norm",), role="bias").groups == {"norm", "bias"}
    assert roles_from_axes(("norm",)).groups == {"norm"}
    assert roles_from_axes(("vocab", "embed")).groups == {"embedding"}
    assert roles_from_axes(("embed",), role="embedding").groups == {"embedding"}
    assert roles_from_axes(("max_len", "embed")).groups == frozenset()  # decayed, as before the roles
    assert roles_from_axes(("embed", "mlp"), projection="up").projection == "up"


class _NoAxes(nnx.Module):
    def __init__(self):
        self.good = nnx.Param(jnp.zeros((4, 3)), logical_axes=("embed", "mlp"))
        self.mixer = nnx.Param(jnp.zeros((4, 3)))
        self.short = nnx.Param(jnp.zeros((4, 3)), logical_axes=("embed",))
        self.odd = nnx.Param(jnp.zeros((3,)), logical_axes=("mlp",), role="gain")


def test_a_parameter_without_logical_axes_is_named():
    with pytest.raises(ValueError, match="3 parameter") as err:
        model_param_infos(_NoAxes())
    message = str(err.value)
    assert "'mixer' of shape (4, 3) has logical_axes=None" in message
    assert "'short' of shape (4, 3) has logical_axes=('embed',)" in message
    assert "'odd': role='gain' is not one of" in message
    assert "'good'" not in message


class _UserBlock(nnx.Module):
    """Another project's block: our DenseGeneral under its own attribute names, projections named."""

    def __init__(self, rngs: nnx.Rngs):
        from transformer_jax.nn.linear import DenseGeneral

        self.query_proj = DenseGeneral(8, (2, 4), axes=("embed", "heads", "head_dim"), projection="q", rngs=rngs)
        self.value_proj = DenseGeneral(8, (2, 4), axes=("embed", "kv_heads", "head_dim"), projection="v", rngs=rngs)
        self.mixer = DenseGeneral(8, 8, axes=("embed", "mlp"), rngs=rngs)


def test_lora_targets_a_user_module_by_its_declared_projections():
    block = _UserBlock(nnx.Rngs(0))
    assert apply_lora(block, LoraConfig(rank=2, targets=("q", "v"))) == ["query_proj", "value_proj"]
    infos = _flat(model_param_infos(block))
    assert infos["query_proj/kernel"].projection == "q" and infos["mixer/kernel"].projection is None
    assert {k for k, i in infos.items() if i.role == "adapter"} == {
        f"{p}/lora/{f}" for p in ("query_proj", "value_proj") for f in "ab"
    }
