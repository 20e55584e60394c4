"""Optimizer factory: schedules vs hand-computed values, optimizers, clipping, decay mask, config errors."""

import dataclasses
import math
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.train import optim
from transformer_jax.train.optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    CosineSchedule,
    InverseSqrtSchedule,
    LinearSchedule,
    OptimConfig,
    Sgd,
    learning_rate_at,
    make_optimizer,
    make_schedule,
    warn_schedule,
    weight_decay_mask,
)

# ---------------------------------------------------------------------------- schedules


def _lrs(cfg, total, steps):
    return np.asarray(make_schedule(cfg, total)(jnp.asarray(list(steps))))  # vectorised in step


def test_cosine_hand_values():
    cfg = OptimConfig(lr=1.0, schedule=CosineSchedule(min_lr=0.1), warmup_steps=10)
    # warm-up 0 -> 1 over 10 steps; cosine over steps 10..110; midpoint 60 = (1 + 0.1) / 2.
    got = _lrs(cfg, 110, [0, 5, 10, 35, 60, 110, 200])
    quarter = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25))
    np.testing.assert_allclose(got, [0.0, 0.5, 1.0, quarter, 0.55, 0.1, 0.1], rtol=1e-6, atol=1e-7)


def test_cosine_decay_steps_overrides_total():
    cfg = OptimConfig(lr=1.0, schedule=CosineSchedule(min_lr=0.0, decay_steps=20), warmup_steps=0)
    np.testing.assert_allclose(_lrs(cfg, 1000, [0, 10, 20, 500]), [1.0, 0.5, 0.0, 0.0], atol=1e-6)


def test_linear_and_constant():
    lin = OptimConfig(schedule=LinearSchedule(min_lr=0.0), lr=2.0, warmup_steps=4)
    np.testing.assert_allclose(_lrs(lin, 14, [0, 2, 4, 9, 14, 20]), [0, 1, 2, 1, 0, 0], atol=1e-6)
    const = OptimConfig(schedule="constant", lr=0.3, warmup_steps=3)
    np.testing.assert_allclose(_lrs(const, 10, [0, 1, 3, 9, 50]), [0, 0.1, 0.3, 0.3, 0.3], rtol=1e-6)
    flat = OptimConfig(schedule="constant", lr=0.3, warmup_steps=0)
    np.testing.assert_allclose(_lrs(flat, 10, [0, 1, 9]), [0.3] * 3, rtol=1e-6)


def test_inverse_sqrt_is_paper_formula():
    d, w = 512, 4000
    cfg = OptimConfig(schedule=InverseSqrtSchedule(d_model=d), lr=1.0, warmup_steps=w)
    steps = np.array([0, 1, 99, 2000, w - 2, w - 1, w, 10_000, 99_999])
    s = steps + 1.0
    expected = d**-0.5 * np.minimum(s**-0.5, s * w**-1.5)
    np.testing.assert_allclose(_lrs(cfg, 100_000, steps), expected, rtol=1e-5)
    # The peak: the warmup_steps-th update (count warmup_steps - 1).
    dense = _lrs(cfg, 100_000, range(0, 3 * w))
    assert int(np.argmax(dense)) == w - 1
    np.testing.assert_allclose(dense.max(), (d * w) ** -0.5, rtol=1e-5)


def test_inverse_sqrt_lr_is_a_multiplier():
    cfg = OptimConfig(schedule=InverseSqrtSchedule(d_model=64), lr=2.0, warmup_steps=10)
    half = dataclasses.replace(cfg, lr=1.0)
    np.testing.assert_allclose(_lrs(cfg, 50, [3, 30]), 2 * _lrs(half, 50, [3, 30]), rtol=1e-6)


def test_schedule_is_jittable_and_learning_rate_at():
    cfg = OptimConfig(lr=1.0, schedule=CosineSchedule(min_lr=0.1), warmup_steps=10)
    sched = jax.jit(make_schedule(cfg, 110))
    np.testing.assert_allclose(float(sched(jnp.int32(60))), 0.55, rtol=1e-6)
    assert learning_rate_at(cfg, 110, 60) == pytest.approx(0.55, rel=1e-6)


# ---------------------------------------------------------------------------- optimizers


def _quadratic_descent(cfg, steps=60):
    target = jnp.array([1.0, -2.0, 3.0])
    params = {"w": {"kernel": jnp.zeros((3,))}}
    loss = lambda p: jnp.sum((p["w"]["kernel"] - target) ** 2)
    tx, _ = make_optimizer(cfg, steps)
    state = tx.init(params)

    @jax.jit
    def step(p, s):
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    start = float(loss(params))
    for _ in range(steps):
        params, state = step(params, state)
    return start, float(loss(params))


@pytest.mark.parametrize(
    "settings",
    [
        Adam(),
        AdamW(weight_decay=0.0),
        Sgd(weight_decay=0.0),
        Sgd(nesterov=True, weight_decay=0.0),
        Sgd(momentum=0.0, weight_decay=0.0),
    ],
)
def test_each_optimizer_reduces_a_quadratic(settings):
    lr = 0.05 if isinstance(settings, Sgd) else 0.2
    cfg = OptimConfig(optimizer=settings, lr=lr, schedule="constant", warmup_steps=0)
    start, end = _quadratic_descent(cfg)
    assert end < 0.05 * start, (settings, start, end)


def test_registries_list_the_variants():
    assert set(optim.OPTIMIZERS.names()) >= {"adam", "adamw", "sgd"}
    assert set(optim.SCHEDULES.names()) >= {"cosine", "inverse_sqrt", "constant", "linear"}


def test_grad_clip_bounds_the_global_update():
    base = dict(optimizer=Sgd(momentum=0.0, weight_decay=0.0), lr=1.0, schedule=ConstantSchedule(), warmup_steps=0)
    params = {"a": jnp.zeros((4,)), "b": jnp.zeros((2, 3))}
    grads = {"a": jnp.full((4,), 100.0), "b": jnp.full((2, 3), -50.0)}
    for clip, expected in [(1.0, 1.0), (0.5, 0.5), (None, float(optax.tree.norm(grads)))]:
        tx, _ = make_optimizer(OptimConfig(**base, grad_clip=clip), 10)
        updates, _ = tx.update(grads, tx.init(params), params)
        np.testing.assert_allclose(float(optax.tree.norm(updates)), expected, rtol=1e-5)
    small = jax.tree.map(lambda g: g * 1e-4, grads)  # below the bound: untouched
    tx, _ = make_optimizer(OptimConfig(**base, grad_clip=1.0), 10)
    updates, _ = tx.update(small, tx.init(params), params)
    chex.assert_trees_all_close(updates, jax.tree.map(lambda g: -g, small), rtol=1e-6)


# ---------------------------------------------------------------------------- weight decay


def _nested_params():
    return {
        "embed": {"embedding": jnp.ones((10, 4))},
        "layers": {
            "0": {
                "attn": {"q": {"kernel": jnp.ones((4, 4)), "bias": jnp.ones((4,))}},
                "norm1": {"scale": jnp.ones((4,))},
                "mlp": {"w_in": jnp.ones((4, 8)), "b_in": jnp.ones((8,))},
                "ln_2": {"weight": jnp.ones((4,))},
            }
        },
        "wpe": jnp.ones((16, 4)),
        "final": {"scale": jnp.ones((4,))},
        "head": {"kernel": jnp.ones((4, 10))},
    }


def test_weight_decay_mask_nested_dict():
    mask = weight_decay_mask(_nested_params())
    assert mask == {
        "embed": {"embedding": False},
        "layers": {
            "0": {
                "attn": {"q": {"kernel": True, "bias": False}},
                "norm1": {"scale": False},
                "mlp": {"w_in": True, "b_in": False},
                "ln_2": {"weight": False},
            }
        },
        "wpe": False,
        "final": {"scale": False},
        "head": {"kernel": True},
    }


def test_weight_decay_mask_exclude_subsets():
    params = _nested_params()
    assert all(jax.tree.leaves(weight_decay_mask(params, exclude=())))
    only_bias = weight_decay_mask(params, exclude=("bias",))
    assert only_bias["layers"]["0"]["norm1"]["scale"] and only_bias["embed"]["embedding"]
    assert not only_bias["layers"]["0"]["attn"]["q"]["bias"]
    with pytest.raises(ValueError, match="exclude"):
        weight_decay_mask(params, exclude=("norms",))


def test_weight_decay_mask_on_nnx_state_and_shapes():
    class Tiny(nnx.Module):
        def __init__(self, rngs):
            self.tok_embed = nnx.Embed(10, 4, rngs=rngs)
            self.blocks = nnx.List([nnx.Linear(4, 4, rngs=rngs), nnx.LayerNorm(4, rngs=rngs)])
            self.out = nnx.Linear(4, 3, use_bias=False, rngs=rngs)

    model = Tiny(nnx.Rngs(0))
    state = nnx.state(model, nnx.Param)
    mask = weight_decay_mask(state)
    flat = {
        tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in p): v
        for p, v in jax.tree_util.tree_leaves_with_path(mask)
    }
    decayed = {p[:-1] for p, v in flat.items() if v}  # drop the Variable's trailing "value"
    assert decayed == {("blocks", "0", "kernel"), ("out", "kernel")}
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    assert jax.tree.leaves(weight_decay_mask(shapes)) == jax.tree.leaves(mask)
    # And it drives an nnx.Optimizer: a zero-gradient AdamW step only shrinks the two kernels.
    tx, _ = make_optimizer(OptimConfig(lr=0.1, schedule="constant", warmup_steps=0), 5)
    opt = nnx.Optimizer(model, tx, wrt=nnx.Param)
    before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
    opt.update(model, jax.tree.map(jnp.zeros_like, before))
    after = nnx.state(model, nnx.Param)
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before, after))
    assert changed == jax.tree.leaves(mask)


@pytest.mark.parametrize("precomputed", [False, True])
def test_adamw_zero_grad_step_decays_only_masked_leaves(precomputed):
    params = _nested_params()
    cfg = OptimConfig(AdamW(weight_decay=0.5), lr=0.1, schedule="constant", warmup_steps=0)
    tx, _ = make_optimizer(cfg, 10, param_info=params if precomputed else None)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(tx.update)(zeros, tx.init(params), params)
    new = optax.apply_updates(params, updates)
    mask = weight_decay_mask(params)
    expected = jax.tree.map(lambda p, m: p * (1 - 0.1 * 0.5) if m else p, params, mask)
    chex.assert_trees_all_close(new, expected, rtol=1e-6)


def test_adam_never_decays_and_sgd_decays_decoupled():
    params = _nested_params()
    zeros = jax.tree.map(jnp.zeros_like, params)
    tx, _ = make_optimizer(OptimConfig(optimizer="adam", schedule="constant", warmup_steps=0), 10)
    updates, _ = tx.update(zeros, tx.init(params), params)
    assert all(float(jnp.abs(u).max()) == 0.0 for u in jax.tree.leaves(updates))
    cfg = OptimConfig(Sgd(weight_decay=0.5), lr=0.1, schedule="constant", warmup_steps=0)
    tx, _ = make_optimizer(cfg, 10)
    updates, _ = tx.update(zeros, tx.init(params), params)
    np.testing.assert_allclose(updates["head"]["kernel"], -0.05 * params["head"]["kernel"], rtol=1e-6)
    assert float(jnp.abs(updates["layers"]["0"]["attn"]["q"]["bias"]).max()) == 0.0


# ---------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: OptimConfig(optimizer="adamww"), r"optimizer='adamww'.*did you mean 'adamw'.*one of: adam, adamw"),
        (lambda: OptimConfig(schedule="cosin"), r"train.optim.schedule='cosin'.*did you mean 'cosine'"),
        (lambda: OptimConfig(lr=-1e-3), r"lr=-0.001"),
        (lambda: OptimConfig(lr=float("nan")), r"lr=nan"),
        (lambda: OptimConfig(lr=0.01, schedule=CosineSchedule(min_lr=0.1)),
         r"train.optim.schedule.min_lr=0.1: exceeds lr=0.01"),
        (lambda: OptimConfig(warmup_steps=-1), r"warmup_steps=-1"),
        (lambda: OptimConfig(warmup_steps=50, schedule=LinearSchedule(decay_steps=10)),
         r"warmup_steps=50: exceeds train.optim.schedule.decay_steps=10"),
        (lambda: OptimConfig(schedule=InverseSqrtSchedule(d_model=8), warmup_steps=0, lr=1.0), r"warmup_steps=0"),
        (lambda: OptimConfig(grad_clip=0.0), r"train.optim.grad_clip=0.0: must be > 0.0"),
        (lambda: Adam(b1=1.0), r"train.optim.optimizer.b1=1.0"),
        (lambda: AdamW(eps=0.0), r"train.optim.optimizer.eps=0.0"),
        (lambda: AdamW(decay_exclude=("norms",)), r"train.optim.optimizer.decay_exclude.*'norm'"),
        (lambda: Sgd(decay_exclude="norm"), r"decay_exclude='norm': must be a tuple"),  # type: ignore[arg-type]
        (lambda: Sgd(nesterov=1), r"train.optim.optimizer.nesterov=1"),  # type: ignore[arg-type]
        (lambda: InverseSqrtSchedule(d_model=0), r"train.optim.schedule.d_model=0"),
    ],
)  # fmt: skip
def test_invalid_configs_name_the_field(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


def test_decay_exclude_list_becomes_tuple():
    assert AdamW(decay_exclude=["bias"]).decay_exclude == ("bias",)  # type: ignore[arg-type]


def test_inverse_sqrt_needs_d_model_when_built():
    cfg = OptimConfig(schedule="inverse_sqrt", lr=1.0)  # d_model may be filled in later
    with pytest.raises(ValueError, match=r"d_model=None.*set train.optim.schedule.d_model"):
        make_schedule(cfg, 100)
    with pytest.raises(ValueError, match=r"d_model=None"):
        make_optimizer(cfg, 100)


def test_inverse_sqrt_small_multiplier_warns():
    with pytest.warns(UserWarning, match="multiplier.*peak learning rate will be 6.99e-07"):
        warn_schedule(OptimConfig(schedule=InverseSqrtSchedule(d_model=512), lr=1e-3, warmup_steps=4000), 10**5)


def test_warmup_longer_than_run_warns_not_errors():
    cfg = OptimConfig(warmup_steps=100)
    with pytest.warns(UserWarning, match="warmup_steps=100 > total_steps=10"):
        warn_schedule(cfg, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # building the schedule never warns (eval, sample and export build it)
        sched = make_schedule(cfg, 10)
        warn_schedule(cfg, 1000)
    assert 0.0 < float(sched(9)) < cfg.lr
    with pytest.raises(ValueError, match="total_steps=0"):
        make_schedule(cfg, 0)


def test_weight_decay_mask_of_a_model_follows_param_roles():
    """The mask and Muon's partition come from one classification (`param_roles`): on a model the
    decayed leaves are the hidden matrices, the untied head and the learned position table (which no
    decay group names, as before the roles); norms (scale and bias), biases and the embedding are not."""
    from transformer_jax.models import abstract_model, get_preset
    from transformer_jax.models.param_roles import param_roles

    model = abstract_model(get_preset("gpt2_tiny", n_layers=1, embeddings=EmbeddingsConfig(tie=False)))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    pairs = list(zip(jax.tree.leaves(param_roles(params)), jax.tree.leaves(weight_decay_mask(params))))
    assert {r for r, m in pairs if m} == {"hidden_matrix", "head", "position"}
    assert {r for r, m in pairs if not m} == {"embedding", "norm", "bias"}
