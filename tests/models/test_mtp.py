"""Multi-token prediction (DeepSeek-V3 section 2.2): the config and its ``--set`` keys, module k
reading exactly the tokens up to t_{i+k}, the per-depth loss against a naive loop, the train step
adding lambda / D * sum_k CE_k, and the modules' parameter roles."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.core.unread import check_reads
from transformer_jax.models import ModelConfig, ModelDims, abstract_model, build_model
from transformer_jax.models.config import with_changes
from transformer_jax.models.model_roles import is_param_info, model_param_infos
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.models.param_roles import path_names, role_table
from transformer_jax.ops.losses import cross_entropy, mtp_nll_sums
from transformer_jax.train.config import Config

TINY = ModelConfig(
    dims=ModelDims(vocab_size=16, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16), mtp=MTPConfig(depth=2)
)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"depth": 0}, "model.mtp.depth=0: must be >= 1"),
        ({"depth": 2.0}, "model.mtp.depth=2.0: must be an integer"),
        ({"loss_weight": math.nan}, "model.mtp.loss_weight=nan: must be a finite number"),
        ({"loss_weight": math.inf}, "model.mtp.loss_weight=inf"),
        ({"loss_weight": -0.1}, "model.mtp.loss_weight=-0.1: must be >= 0.0"),
    ],
)
def test_bad_mtp_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MTPConfig(**kwargs)


def test_mtp_needs_a_decoder_lm_and_room_for_its_targets():
    with pytest.raises(ConfigError, match=r"model.mtp=.*needs model.kind='decoder_lm'"):
        ModelConfig(kind="encoder_decoder", dims=ModelDims(n_encoder_layers=1), mtp=MTPConfig())
    with pytest.raises(ConfigError, match=r"model.mtp.depth=3: leaves no target within model.dims.max_len=4"):
        ModelConfig(dims=ModelDims(max_len=4), mtp=MTPConfig(depth=3))


def test_set_turns_mtp_on_and_sets_its_fields_like_moe():
    cfg = apply_overrides(Config(), ["model.mtp=on", "model.mtp.depth=2", "model.mtp.loss_weight=0.1"])
    assert cfg.model.mtp == MTPConfig(depth=2, loss_weight=0.1)
    check_reads(cfg)  # a decoder_lm reads model.mtp
    assert apply_overrides(cfg, ["model.mtp=none"]).model.mtp is None
    with pytest.raises(ConfigError, match=r"model.mtp is None \(off\).*--set model.mtp=on"):
        apply_overrides(Config(), ["model.mtp.depth=2"])
    with pytest.raises(ConfigError, match=r"unknown config key 'model.mtp.dept'.*model.mtp.depth"):
        apply_overrides(cfg, ["model.mtp.dept=2"])


def test_module_k_sees_tokens_up_to_i_plus_k_and_no_further():
    model = build_model(TINY)
    mtp_logits = jax.jit(lambda tokens: model(tokens)[1]["mtp"]["logits"])
    tokens = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10]])
    i = 2
    for k, logits in enumerate(mtp_logits(tokens), start=1):
        later = tokens.at[0, i + k + 1 :].set(1)  # tokens after t_{i+k}: no effect at i
        np.testing.assert_allclose(mtp_logits(later)[k - 1][0, i], logits[0, i], rtol=1e-6)
        at = tokens.at[0, i + k].set(1)  # t_{i+k} itself: read through Emb(t_{i+k})
        assert not np.allclose(mtp_logits(at)[k - 1][0, i], logits[0, i], atol=1e-4)


def test_mtp_nll_sums_equal_a_naive_loop_over_depths_and_segments():
    rng = np.random.default_rng(0)
    B, T, V, D = 2, 7, 5, 2
    logits = [jnp.asarray(rng.normal(size=(B, T, V)), jnp.float32) for _ in range(D)]
    targets = rng.integers(0, V, (B, T))
    weights = rng.integers(0, 2, (B, T)).astype(np.float32)
    segments = np.array([[1, 1, 1, 2, 2, 2, 2], [1, 1, 1, 1, 1, 0, 0]])
    nll, weight = mtp_nll_sums(tuple(logits), jnp.asarray(targets), jnp.asarray(weights), jnp.asarray(segments))
    for k in range(1, D + 1):
        want_nll = want_w = 0.0
        for b in range(B):
            for i in range(T - k):
                if segments[b, i] != segments[b, i + k] or not weights[b, i + k]:
                    continue
                lp = jax.nn.log_softmax(np.asarray(logits[k - 1][b, i], np.float64))
                want_nll -= float(lp[targets[b, i + k]]) * weights[b, i + k]
                want_w += weights[b, i + k]
        np.testing.assert_allclose(nll[k - 1], want_nll, rtol=1e-5)
        assert float(weight[k - 1]) == want_w


def test_train_step_gradient_is_that_of_main_plus_lambda_over_d_times_the_depth_losses():
    import optax
    from flax import nnx

    from transformer_jax.models.forward import FORWARDS
    from transformer_jax.train.config import TrainConfig
    from transformer_jax.train.state import TrainState
    from transformer_jax.train.step import make_train_step

    model = build_model(dataclasses.replace(TINY, mtp=MTPConfig(depth=2, loss_weight=0.5)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params), nnx.to_pure_dict(rest)
    tokens = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10], [9, 8, 7, 6, 5, 4, 3, 2]])
    weights = jnp.array([[1.0] * 7, [1.0] * 5 + [0.0] * 2])
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": weights,
        "positions": jnp.broadcast_to(jnp.arange(7), (2, 7)),
        "segment_ids": jnp.ones((2, 7), jnp.int32),
    }

    def want_objective(p):  # written out: CE + lambda / D * sum_k CE_k, over the main target count
        logits, aux = nnx.merge(graphdef, p, rest)(batch["inputs"])
        main = cross_entropy(logits, batch["targets"], weights_BT=weights)["loss_sum"]
        nll, _ = mtp_nll_sums(aux["mtp"]["logits"], batch["targets"], weights)
        return (main + 0.5 / 2 * jnp.sum(nll)) / jnp.sum(weights)

    tx = optax.sgd(1.0)  # update = -gradient
    zero = jnp.zeros((), jnp.int32)
    state = TrainState(zero, params, rest, tx.init(params), zero, zero)
    step = make_train_step(graphdef, tx, FORWARDS.get("lm"), TrainConfig(), lambda s: 1.0)
    after, metrics = jax.jit(step)(state, batch, jax.random.key(0))
    assert {"mtp_loss/1", "mtp_loss/2"} <= set(metrics) and float(metrics["mtp_loss/2"]) > 0
    want = jax.jit(jax.grad(want_objective))(params)
    got = jax.tree.map(lambda a, b: a - b, params, after.params)
    assert float(jnp.abs(want["mtp"]["layers"][1]["proj"]["kernel"]).max()) > 0
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("scan", [False, True])
def test_mtp_parameters_carry_roles_equal_to_the_path_rules(scan):
    model = abstract_model(with_changes(TINY, scan_layers=scan))
    leaves = jax.tree_util.tree_flatten_with_path(model_param_infos(model), is_leaf=is_param_info)[0]
    from_model = {"/".join(path_names(p)): info for p, info in leaves}
    from flax import nnx

    assert from_model == role_table(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    proj = from_model["mtp/layers/0/proj/kernel"]
    assert proj.role == "hidden_matrix" and proj.view is not None and proj.view.reduction == (0,)
    assert from_model["mtp/layers/1/hidden_norm/scale"].role == "norm"
    assert from_model["mtp/layers/1/block/self_attn/q/kernel"].projection == "q"


def test_export_drops_the_mtp_modules_with_a_warning_naming_them(tmp_path):
    import json

    from transformer_jax.models import get_preset
    from transformer_jax.models.hf import save_pretrained

    cfg = get_preset("llama_tiny", d_model=16, n_heads=2, n_kv_heads=1, d_ff=32, n_layers=1, vocab_size=16)
    model = build_model(dataclasses.replace(cfg, mtp=MTPConfig(depth=2)))
    with pytest.warns(UserWarning, match=r"model.mtp: .* mtp.layers.0, mtp.layers.1 \(.* parameters\) .* dropped"):
        save_pretrained(model, tmp_path)
    assert "mtp" not in json.dumps(json.loads((tmp_path / "config.json").read_text()))
