"""MoE in the model families: presets, every-n-th layer with loop == scan, aux aggregation, the
balancing bias through the train step, configuration errors, FLOPs of fine-grained experts."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import ModelConfig, build_model, count_params, get_preset
from transformer_jax.models.config import with_changes
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.mlp import FeedForward
from transformer_jax.nn.moe import MoE
from transformer_jax.nn.moe_config import (
    BalanceLossConfig,
    CapacityConfig,
    ExpertGroupsConfig,
    SigmoidRouter,
    SoftmaxRouter,
)
from transformer_jax.train.metrics import MetricsWriter, read_metrics

from .helpers import random_tokens

MOE_PRESETS = ("switch_tiny", "gshard_tiny", "deepseek_moe_tiny", "deepseek_v3_tiny", "mixtral_tiny")


def _forward(model, tokens, train=False):
    """Jitted forward; returns (logits, aux, the model's non-parameter state after the call)."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, tokens):
        m = nnx.merge(graphdef, state)
        logits, aux = m(tokens, dropout_key=jax.random.key(0) if train else None)
        return logits, aux, nnx.state(m, nnx.Not(nnx.Param))

    return run(state, tokens)


def _scanned_like(model, **overrides):
    """The same weights in a ``scan_layers=True`` model: dense blocks stack under ``layers``,
    MoE blocks (every n-th) under ``moe_layers`` when n > 1."""
    cfg = with_changes(model.cfg, scan_layers=True, **overrides)
    scanned = build_model(cfg, seed=1)
    every = cfg.moe.every if cfg.moe else 1
    L = cfg.dims.n_layers
    moe_ids = [i for i in range(L) if (i + 1) % every == 0]
    groups = {"layers": [i for i in range(L) if every == 1 or i not in moe_ids], "moe_layers": moe_ids}
    src = dict(nnx.to_flat_state(nnx.state(model)))
    dst = nnx.state(scanned)
    for path, var in nnx.to_flat_state(dst):
        if path[0] == "layers" and path[1] in groups:
            var[...] = jnp.stack([src[("layers", "layers", i) + path[2:]][...] for i in groups[path[1]]])
        else:
            var[...] = src[path][...]
    nnx.update(scanned, dst)
    return scanned


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_presets_report_aux(name):
    """Shapes only (``jax.eval_shape``: traced, not compiled); values are checked below."""
    cfg = get_preset(name)
    model = nnx.eval_shape(lambda: build_model(cfg))
    graphdef, state = nnx.split(model)
    tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    logits, aux = jax.eval_shape(lambda s, t: nnx.merge(graphdef, s)(t, dropout_key=jax.random.key(0)), state, tokens)
    assert logits.shape == (2, 8, cfg.dims.vocab_size)
    n_moe = cfg.dims.n_layers // cfg.moe.every
    assert set(aux["losses"]) == {"moe_balance"} and aux["losses"]["moe_balance"].shape == ()
    assert aux["metrics"]["moe_load"].shape == (n_moe, cfg.moe.n_routed)
    assert aux["metrics"]["moe_load_max_over_mean"].shape == (n_moe,)
    assert aux["metrics"]["moe_dropped_fraction"].shape == (n_moe,)


def test_moe_replaces_the_ffn_in_every_nth_layer():
    model = build_model(get_preset("switch_tiny", n_layers=4))
    kinds = [type(block.ffn) for block in model.layers.layers]
    assert kinds == [FeedForward, MoE, FeedForward, MoE]
    dense = count_params(get_preset("gpt2_tiny", n_layers=4))
    moe = get_preset("switch_tiny").moe
    router, extra_experts = 64 * 8, (moe.n_experts - 1) * (2 * 64 * 256 + 256 + 64)
    assert count_params(model) == dense + 2 * (router + extra_experts)


def _v3_every2():
    """deepseek_v3_tiny (balancing bias) with MoE in layers 1 and 3 of 4."""
    base = get_preset("deepseek_v3_tiny")
    return build_model(with_changes(base, n_layers=4, moe=dataclasses.replace(base.moe, every=2)))


def test_scan_over_groups_equals_loop():
    """every=2: the scan over groups (dense, MoE) gives the loop's logits, aux and bias updates."""
    model = _v3_every2()
    scanned = _scanned_like(model)
    tokens = random_tokens(jax.random.key(1), (2, 8), 200)
    logits, aux, state = _forward(model, tokens, train=True)
    logits_s, aux_s, state_s = _forward(scanned, tokens, train=True)
    np.testing.assert_allclose(logits_s, logits, atol=1e-5, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5), aux_s, aux)
    biases = [v[...] for _, v in nnx.to_flat_state(state)]
    (biases_s,) = [v[...] for _, v in nnx.to_flat_state(state_s)]
    assert len(biases) == 2 and biases_s.shape == (2, 8) and float(jnp.abs(biases_s).sum()) > 0
    np.testing.assert_allclose(jnp.stack(biases), biases_s)


def test_grouped_scan_cache_equals_recompute():
    """Dropless routing decides per token, so cached decoding equals the full forward pass."""
    model = _scanned_like(_v3_every2())
    graphdef, state = nnx.split(model)
    tokens = random_tokens(jax.random.key(0), (2, 5), 200)
    full = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t)[0])(state, tokens)
    step = jax.jit(lambda s, t, c: nnx.merge(graphdef, s)(t, cache=c))
    cache = model.init_cache(2, 8)
    for t in range(5):
        logits, aux = step(state, tokens[:, t : t + 1], cache)
        cache = aux["cache"]
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_encoder_decoder_aggregates_both_stacks():
    cfg = get_preset("original_tiny", moe=MoEConfig(n_experts=4, top_k=2, z_loss_coef=1e-3))
    model = build_model(cfg)
    src, tgt = random_tokens(jax.random.key(0), (2, 5), 100), random_tokens(jax.random.key(1), (2, 4), 100)
    graphdef, state = nnx.split(model)
    logits, aux = jax.eval_shape(lambda st, s, t: nnx.merge(graphdef, st)(s, t), state, src, tgt)
    assert set(aux["losses"]) == {
        f"{side}/{name}" for side in ("encoder", "decoder") for name in ("moe_balance", "router_z")
    }
    assert aux["metrics"]["encoder/moe_load"].shape == (2, 4)
    assert "moe" not in aux.get("encoder", {}) and "moe" not in aux.get("decoder", {})


def _lazy(cls, **kw):
    """A settings group built inside the test (its construction is what fails)."""
    return lambda: cls(**kw)


def _groups(**kw):
    return lambda: SigmoidRouter(groups=ExpertGroupsConfig(**kw))


INVALID = [
    (dict(n_experts=0), "model.moe.n_experts", ">= 1"),
    (dict(top_k=9), "model.moe.top_k", "n_experts=8"),
    (dict(segments=4, n_shared=8), "model.moe.n_shared", "no routed expert"),
    (dict(d_expert=100, segments=8), "model.moe.d_expert", "segments"),
    (dict(router="softmax"), "model.moe.router", "softmax_topk"),
    (dict(dispatch="paded"), "model.moe.dispatch", "padded"),
    (dict(balance=_lazy(BalanceLossConfig, loss="gshard")), "model.moe.balance.loss", "switch"),
    (dict(balance=_lazy(BalanceLossConfig, coef=0.0)), "model.moe.balance.coef", "> 0"),
    (dict(capacity=_lazy(CapacityConfig, drop_order="random")), "model.moe.capacity.drop_order", "rank"),
    (dict(capacity=_lazy(CapacityConfig, factor=0.0)), "model.moe.capacity.factor", "> 0"),
    (dict(router=_groups(n_groups=3)), "model.moe.router.groups.n_groups", "divide"),
    (dict(router=_groups(n_groups=4, topk_groups=1), top_k=4), "model.moe.router.groups.topk_groups", "fewer"),
    (dict(router=_groups(n_groups=2, topk_groups=3)), "model.moe.router.groups.topk_groups", "exceeds"),
    (dict(router=_groups(n_groups=1)), "model.moe.router.groups.n_groups", ">= 2"),
    (dict(router=_lazy(SoftmaxRouter, bias_update_rate=-1.0)), "model.moe.router.bias_update_rate", ">= 0"),
    (dict(router=_lazy(SigmoidRouter, scaling_factor=0.0)), "model.moe.router.scaling_factor", "> 0"),
    (dict(ffn="swish"), "model.moe.ffn", "swiglu"),
]


@pytest.mark.parametrize("kwargs,field,hint", INVALID, ids=[f"{f[1]}:{i}" for i, f in enumerate(INVALID)])
def test_invalid_moe_config_names_field(kwargs, field, hint):
    with pytest.raises(ConfigError) as err:
        MoEConfig(**{k: v() if callable(v) else v for k, v in kwargs.items()})
    assert str(err.value).startswith(field + "=") and hint in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "kwargs,hint",
    [
        (dict(n_layers=2, moe=MoEConfig(every=3)), "leaves a stack without MoE"),
        (dict(n_layers=3, scan_layers=True, moe=MoEConfig(every=2)), "does not divide model.dims.n_layers=3"),
        (
            dict(kind="encoder_decoder", n_encoder_layers=2, n_layers=2, scan_layers=True, moe=MoEConfig(every=2)),
            "not supported for encoder_decoder",
        ),
        (dict(d_ff=100, moe=MoEConfig(segments=8)), "model.moe.segments=8"),
    ],
)
def test_invalid_model_moe_combinations(kwargs, hint):
    with pytest.raises(ConfigError, match="model.moe") as err:
        with_changes(ModelConfig(), **kwargs)
    assert hint in str(err.value)


def test_moe_settings_from_the_command_line():
    cfg = apply_overrides(
        get_preset("gpt2_tiny"),
        ["moe=on", "moe.n_experts=4", "moe.dispatch=expert_parallel", "moe.capacity=on", "moe.capacity.factor=1.5"],
    )
    assert cfg.moe == MoEConfig(n_experts=4, dispatch="expert_parallel", capacity=CapacityConfig(factor=1.5))
    with pytest.raises(ConfigError, match=r"moe is None \(off\).*--set moe=on"):
        apply_overrides(get_preset("gpt2_tiny"), ["moe.n_experts=4"])  # never turns MoE on by the way
    assert apply_overrides(cfg, ["moe=on"]).moe == cfg.moe and apply_overrides(cfg, ["moe=none"]).moe is None


def _flops_per_token(cfg, tokens):
    model = build_model(cfg)
    graphdef, state = nnx.split(model)
    cost = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t)[0]).lower(state, tokens).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"] / tokens.size


def test_fine_grained_preset_has_the_flops_of_its_coarse_counterpart():
    """deepseek_moe_tiny (1 shared + top-7 of 15 experts of width 32) against 4 experts of width
    128, top-2, with the same capacity factor (static shapes; XLA's cost analysis of the model's
    forward pass). The expert FLOPs are equal; the difference is the bigger router (15 vs 4
    centroids) and the routing bookkeeping over 7 instead of 2 choices: 3.3% at this tiny width."""
    fine = get_preset("deepseek_moe_tiny")
    fine = dataclasses.replace(
        fine, moe=dataclasses.replace(fine.moe, capacity=CapacityConfig(factor=1.0), dispatch="padded")
    )
    coarse = dataclasses.replace(fine, moe=dataclasses.replace(fine.moe, segments=1, n_shared=0))
    assert count_params(fine) - count_params(coarse) == fine.dims.n_layers * 64 * (15 - 4)  # router centroids
    tokens = random_tokens(jax.random.key(0), (4, 30), 200)
    f_fine, f_coarse = _flops_per_token(fine, tokens), _flops_per_token(coarse, tokens)
    assert abs(f_fine / f_coarse - 1) < 0.04, (f_fine, f_coarse)


def test_train_step_logs_moe_metrics_and_updates_the_bias(tmp_path):
    """The real train step on a synthetic batch: aux losses and per-layer metrics are reported,
    the balancing biases (model state, not parameters) are updated, 2-D metrics are logged."""
    from transformer_jax.models.forward import FORWARDS
    from transformer_jax.parallel import MeshConfig, make_mesh
    from transformer_jax.train.config import TrainConfig
    from transformer_jax.train.optim import OptimConfig, make_optimizer
    from transformer_jax.train.state import init_state, model_graph
    from transformer_jax.train.step import make_train_step

    cfg = get_preset(
        "nanogpt_char",
        d_model=32,
        n_heads=2,
        d_ff=64,
        n_layers=2,
        max_len=16,
        moe=MoEConfig(n_experts=4, router=SoftmaxRouter(bias_update_rate=0.01), z_loss_coef=1e-3),
    )
    train = TrainConfig(steps=2, batch_size=2, optim=OptimConfig(lr=1e-3, warmup_steps=0))
    tx, schedule = make_optimizer(train.optim, train.steps)
    state = init_state(cfg, tx, seed=0, mesh=make_mesh(MeshConfig(), jax.devices()[:1]))
    step = jax.jit(make_train_step(model_graph(cfg)[0], tx, FORWARDS.get("lm"), train, schedule))
    tokens = random_tokens(jax.random.key(0), (2, 17), 60)
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": jnp.ones((2, 16)),
        "positions": jnp.broadcast_to(jnp.arange(16), (2, 16)),
        "segment_ids": jnp.ones((2, 16), jnp.int32),
    }
    new_state, metrics = step(state, batch, jax.random.key(0))
    assert {"aux/moe_balance", "aux/router_z"} <= set(metrics)
    assert metrics["aux_metrics/moe_load"].shape == (2, 4)
    assert metrics["aux_metrics/moe_dropped_fraction"].shape == (2,)
    biases = jax.tree.leaves(new_state.model_state)
    assert len(biases) == 2 and all(float(jnp.abs(b).sum()) > 0 for b in biases)
    assert all(float(jnp.abs(b).sum()) == 0 for b in jax.tree.leaves(state.model_state))
    with MetricsWriter(tmp_path) as writer:
        writer.write(1, {f"train/{k}": v for k, v in jax.device_get(metrics).items() if k.startswith("aux")})
    record = read_metrics(tmp_path)[0]
    assert np.asarray(record["train/aux_metrics/moe_load"]).shape == (2, 4)


def test_cached_decoding_ignores_capacity_so_rows_stay_independent():
    """A capacity of 1/4 token per expert would drop most of a batch's assignments; decoding with a
    KV cache is dropless, so each row decodes as it would alone (no other row takes its slot)."""
    cfg = get_preset(
        "gpt2_tiny", moe=MoEConfig(n_experts=4, top_k=1, capacity=CapacityConfig(factor=0.25), dispatch="dense")
    )
    model = build_model(cfg)
    graphdef, state = nnx.split(model)
    tokens = random_tokens(jax.random.key(0), (3, 4), 200)
    step = jax.jit(lambda s, t, c: nnx.merge(graphdef, s)(t, cache=c))

    def decode(rows):
        cache, out = model.init_cache(rows.shape[0], 8), []
        for t in range(rows.shape[1]):
            logits, aux = step(state, rows[:, t : t + 1], cache)
            cache = aux["cache"]
            out.append(logits[:, 0])
        return jnp.stack(out, axis=1)

    together = decode(tokens)
    for b in range(3):
        np.testing.assert_allclose(together[b], decode(tokens[b : b + 1])[0], atol=1e-5, rtol=1e-5)
    _, aux = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))(state, tokens)
    assert float(jnp.max(aux["metrics"]["moe_dropped_fraction"])) > 0.3  # the full pass does drop
