"""Muon: one update against a NumPy Newton-Schulz reference (2-D, 3-D attention kernels, scanned
4-D kernels, expert weights), the parameter partition of real models (matrix views per path, the
rest on AdamW, checked against the parameters' logical axes), a tiny model trained with it, and
the config errors of its fields."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.models import abstract_model, get_preset
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.param_roles import MATRIX_ROLES, path_names, role_table
from transformer_jax.train.optim import OPTIMIZERS, AdamW, Muon, OptimConfig, make_optimizer, muon_dimension_numbers

MDN = optax.contrib.MuonDimensionNumbers
NS_COEFFS = (3.4445, -4.7750, 2.0315)

# ---------------------------------------------------------------------------- NumPy reference


def _newton_schulz(g: np.ndarray, steps: int = 5, eps: float = 1e-8) -> np.ndarray:
    """Quintic Newton-Schulz on a [fan_in, fan_out] matrix (on its transpose when fan_in > fan_out)."""
    a, b, c = NS_COEFFS
    x = g.astype(np.float64)
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.linalg.norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def _muon_updates(grads, params, to_matrices, *, beta, lr, wd, rms=None, steps=5):
    """The Muon updates of one parameter for successive gradients (the parameter updated in between).

    Momentum ``m_t = beta m + (1 - beta) g``, Nesterov with bias correction as optax
    (``beta m_t / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t)``), orthogonalised per matrix of
    ``to_matrices(x) -> (matrices [n, fan_in, fan_out], back)``, scaled by
    ``sqrt(max(1, fan_out / fan_in))`` (or ``rms * sqrt(max(fan_in, fan_out))``), plus ``wd * p``,
    times ``-lr``."""
    m, p, out = np.zeros_like(grads[0], np.float64), params.astype(np.float64), []
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        m = beta * m + (1 - beta) * g
        nesterov = beta * m / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta**t)
        mats, back = to_matrices(nesterov)
        fan_in, fan_out = mats.shape[1:]
        scale = math.sqrt(max(1, fan_out / fan_in)) if rms is None else rms * math.sqrt(max(fan_in, fan_out))
        ortho = back(np.stack([_newton_schulz(x, steps) for x in mats]))
        u = -lr * (scale * ortho + wd * p)
        out.append(u)
        p = p + u
    return out


def _matrix(x):
    return x[None], lambda y: y[0]


def _flat(n_batch: int, n_in: int):
    """[batch..., in..., out...] -> [prod(batch), prod(in), prod(out)] and back (C order)."""

    def to(x):
        shape = x.shape
        b, i = math.prod(shape[:n_batch]), math.prod(shape[n_batch : n_batch + n_in])
        return x.reshape(b, i, -1), lambda y: y.reshape(shape)

    return to


def _nest(path: str, leaf) -> dict:
    *outer, last = path.split("/")
    tree: dict = {last: leaf}
    for key in reversed(outer):
        tree = {key: tree}
    return tree


def _get(tree, path: str):
    for key in path.split("/"):
        tree = tree[key]
    return tree


def _run_tx(cfg, params, grads_seq):
    tx, _ = make_optimizer(cfg, 100)
    state = tx.init(params)
    update = jax.jit(tx.update)
    out = []
    for grads in grads_seq:
        u, state = update(grads, state, params)
        params = optax.apply_updates(params, u)
        out.append(u)
    return out


def _cfg(lr=1.0, **muon):
    settings = Muon(**{"weight_decay": 0.1, **muon})
    return OptimConfig(optimizer=settings, lr=lr, schedule="constant", warmup_steps=0, grad_clip=None)


# (path in a model's parameter tree, shape, matrix view as (n_batch, n_in) for _flat):
# 2-D FFN kernels both ways round, q [D, H, Dh], o [H, Dh, D], scanned q/o [L, ...], experts [E, D, F].
CASES = [
    ("layers/0/ffn/w_in/kernel", (6, 4), _matrix),
    ("layers/0/ffn/w_out/kernel", (4, 6), _matrix),
    ("layers/0/self_attn/q/kernel", (6, 2, 2), _flat(0, 1)),
    ("layers/0/self_attn/o/kernel", (2, 2, 6), _flat(0, 2)),
    ("layers/self_attn/q/kernel", (3, 6, 2, 2), _flat(1, 1)),
    ("layers/cross_attn/o/kernel", (3, 2, 2, 6), _flat(1, 2)),
    ("layers/1/ffn/w_in", (3, 6, 4), _flat(1, 1)),
    ("moe_layers/ffn/w_out", (2, 3, 4, 6), _flat(2, 1)),
]


@pytest.mark.parametrize("path, shape, view", CASES, ids=[f"{c[0]}{list(c[1])}" for c in CASES])
@pytest.mark.parametrize("rms", [None, 0.2])
def test_three_updates_match_numpy_newton_schulz(path, shape, view, rms):
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(3)]
    cfg = _cfg(momentum=0.9, rms=rms)
    got = _run_tx(cfg, _nest(path, jnp.asarray(p0)), [_nest(path, jnp.asarray(g)) for g in grads])
    expected = _muon_updates(grads, p0, view, beta=0.9, lr=1.0, wd=0.1, rms=rms)
    for step, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(np.asarray(_get(g, path)), e, atol=1e-5, err_msg=f"update {step}")


def test_ns_steps_and_adam_lr_reach_their_parts():
    path, rng = "layers/0/ffn/w_in/kernel", np.random.default_rng(1)
    p0, g = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(6, 4)).astype(np.float32)
    params = {**_nest(path, jnp.asarray(p0)), "final_norm": {"scale": jnp.ones((4,))}}
    grads = {**_nest(path, jnp.asarray(g)), "final_norm": {"scale": jnp.full((4,), 0.5)}}
    (u,) = _run_tx(_cfg(lr=0.5, adam_lr=0.01, ns_steps=2, weight_decay=0.0), params, [grads])
    (e,) = _muon_updates([g], p0, _matrix, beta=0.95, lr=0.5, wd=0.0, steps=2)
    np.testing.assert_allclose(np.asarray(_get(u, path)), e, atol=1e-5)
    np.testing.assert_allclose(u["final_norm"]["scale"], -0.01, rtol=1e-4)  # Adam's first step: -lr * sign(g)


# ---------------------------------------------------------------------------- partition of real models


def _moe_lm(scan: bool):
    """Decoder LM, 2 layers (dense, then MoE with a shared expert), untied head; D=16, H=2, K=1, Dh=8."""
    moe = MoEConfig(n_experts=4, top_k=2, every=2, n_shared=1, d_expert=24, dispatch="dense")
    return get_preset(
        "llama_tiny",
        vocab_size=32,
        d_model=16,
        n_heads=2,
        n_kv_heads=1,
        d_ff=32,
        n_layers=2,
        max_len=16,
        moe=moe,
        scan_layers=scan,
    )


def _abstract_params(cfg):
    return nnx.to_pure_dict(nnx.state(abstract_model(cfg), nnx.Param))


def _dims_by_path(params) -> dict[str, MDN | None]:
    dims = muon_dimension_numbers(params)
    is_leaf = lambda x: x is None or isinstance(x, MDN)
    return {"/".join(path_names(p)): d for p, d in jax.tree_util.tree_flatten_with_path(dims, is_leaf=is_leaf)[0]}


QKV, O, FFN = MDN((0,), (1, 2)), MDN((0, 1), (2,)), MDN((0,), (1,))
S_QKV, S_O, S_FFN = MDN((1,), (2, 3)), MDN((1, 2), (3,)), MDN((1,), (2,))  # behind a layers axis
MUON_UNSCANNED = {
    **{f"layers/layers/{i}/self_attn/{n}/kernel": QKV for i in (0, 1) for n in "qkv"},
    **{f"layers/layers/{i}/self_attn/o/kernel": O for i in (0, 1)},
    **{f"layers/layers/0/ffn/{n}/kernel": FFN for n in ("w_in", "w_gate", "w_out")},
    **{f"layers/layers/1/ffn/{n}": MDN((1,), (2,)) for n in ("w_in", "w_gate", "w_out")},  # [E, D, F]
    **{f"layers/layers/1/ffn/shared/{n}/kernel": FFN for n in ("w_in", "w_gate", "w_out")},
}
MUON_SCANNED = {  # dense layers in layers/layers [1, ...], MoE layers in layers/moe_layers [1, ...]
    **{f"layers/{s}/self_attn/{n}/kernel": S_QKV for s in ("layers", "moe_layers") for n in "qkv"},
    **{f"layers/{s}/self_attn/o/kernel": S_O for s in ("layers", "moe_layers")},
    **{f"layers/layers/ffn/{n}/kernel": S_FFN for n in ("w_in", "w_gate", "w_out")},
    **{f"layers/moe_layers/ffn/{n}": MDN((2,), (3,)) for n in ("w_in", "w_gate", "w_out")},  # [L, E, D, F]
    **{f"layers/moe_layers/ffn/shared/{n}/kernel": S_FFN for n in ("w_in", "w_gate", "w_out")},
}


@pytest.mark.parametrize("scan", [False, True])
def test_moe_lm_partition(scan):
    params = _abstract_params(_moe_lm(scan))
    dims = _dims_by_path(params)
    muon = {p: d for p, d in dims.items() if d is not None}
    assert muon == (MUON_SCANNED if scan else MUON_UNSCANNED)
    adamw = set(dims) - set(muon)
    stack = "layers/moe_layers" if scan else "layers/layers/1"
    assert {"embed/embedding", "lm_head/kernel", "final_norm/scale", f"{stack}/ffn/router/kernel"} <= adamw
    named = {"embed/embedding", "lm_head/kernel", f"{stack}/ffn/router/kernel"}
    assert all(p.endswith("norm/scale") for p in adamw - named)  # the rest: norms (llama has no biases)
    # The optimizer partitions the same way: AdamW's leaves get exactly optimizer="adamw"'s update.
    rng = np.random.default_rng(0)
    values = jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s.shape), jnp.float32), params)
    grads = jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s.shape), jnp.float32), params)
    (u_muon,) = _run_tx(_cfg(lr=0.02, adam_lr=0.003), values, [grads])
    (u_adamw,) = _run_tx(dataclasses.replace(_cfg(), optimizer=AdamW(), lr=0.003), values, [grads])
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(u_muon)[0], jax.tree.leaves(u_adamw)):
        name = "/".join(path_names(path))
        assert np.allclose(a, b, rtol=1e-6, atol=1e-9) == (name in adamw), name


def test_gpt2_partition_biases_positions_tied_embedding():
    dims = _dims_by_path(_abstract_params(get_preset("gpt2_tiny", n_layers=1)))
    layer = "layers/layers/0"
    muon = {p: d for p, d in dims.items() if d is not None}
    assert muon == {
        **{f"{layer}/self_attn/{n}/kernel": QKV for n in "qkv"},
        f"{layer}/self_attn/o/kernel": O,
        f"{layer}/ffn/w_in/kernel": FFN,
        f"{layer}/ffn/w_out/kernel": FFN,
    }
    roles = {p: i.role for p, i in role_table(_abstract_params(get_preset("gpt2_tiny", n_layers=1))).items()}
    assert roles["embed/embedding"] == "embedding" and roles["positions/table"] == "position"
    assert roles[f"{layer}/self_attn/q/bias"] == roles[f"{layer}/ffn/w_out/bias"] == "bias"
    assert roles[f"{layer}/ffn_norm/bias"] == roles["final_norm/scale"] == "norm"


def _view_from_logical_axes(axes: tuple) -> tuple[str, tuple, tuple] | None:
    """(kind, in axes, out axes) that the logical axis names give a weight with >= 2 non-batch axes:
    ``embed`` (the residual stream) is the input of a hidden matrix when it comes first and its
    output when it comes last; ``layers`` and ``experts`` are batch axes."""
    rest = [i for i, a in enumerate(axes) if a not in ("layers", "experts")]
    names = [axes[i] for i in rest]
    if len(rest) >= 2 and names[0] == "latent":  # MLA's up-projections [C, H, Dh]: C -> (H, Dh)
        return "hidden_matrix", (rest[0],), tuple(rest[1:])
    if len(rest) < 2 or "embed" not in names:  # vectors, biases (a kernel's output axes)
        return None
    if "vocab" in names:
        return ("embedding" if names[0] == "vocab" else "head"), (), ()
    if names[0] in ("max_len", "buckets"):
        return "position", (), ()
    if names == ["embed", None]:
        return "router", (), ()
    kind = "expert_matrix" if "experts" in axes else "hidden_matrix"
    if names[0] == "embed":
        return kind, (rest[0],), tuple(rest[1:])
    assert names[-1] == "embed", axes
    return kind, tuple(rest[:-1]), (rest[-1],)


@pytest.mark.parametrize("preset", ["gpt2_tiny", "original_tiny", "deepseek_v3_tiny", "switch_tiny"])
@pytest.mark.parametrize("scan", [False, True])
def test_path_rules_agree_with_logical_axes(preset, scan):
    """The optimizer sees plain dicts (no metadata); its path rules must say what the logical axes say."""
    cfg = get_preset(preset, scan_layers=scan)
    state = nnx.state(abstract_model(cfg), nnx.Param)
    variables = jax.tree_util.tree_flatten_with_path(state, is_leaf=lambda x: isinstance(x, nnx.Variable))[0]
    table = role_table(nnx.to_pure_dict(state))
    assert len(variables) == len(table)
    for path, var in variables:
        name = "/".join(path_names(path))
        info, from_axes = table[name], _view_from_logical_axes(var.get_metadata()["logical_axes"])
        if from_axes is None:
            assert info.role not in MATRIX_ROLES, (name, info)
        else:
            kind, n_in, n_out = from_axes
            assert info.role == kind, (name, info)
            if kind in MATRIX_ROLES:
                assert info.view is not None and (info.view.reduction, info.view.output) == (n_in, n_out), (name, info)


def test_unknown_weight_is_refused_not_left_to_adam():
    params = {"blocks": {"0": {"mixer": {"kernel": jnp.ones((4, 2, 3))}}}}
    tx, _ = make_optimizer(_cfg(), 10)
    with pytest.raises(ValueError, match=r"'blocks/0/mixer/kernel' of shape \(4, 2, 3\) is not a known weight"):
        tx.init(params)


# ---------------------------------------------------------------------------- training


def test_tiny_moe_model_trains_with_muon():
    from transformer_jax.models.forward import FORWARDS
    from transformer_jax.parallel import MeshConfig, make_mesh
    from transformer_jax.train.config import TrainConfig
    from transformer_jax.train.state import init_state, model_graph
    from transformer_jax.train.step import make_train_step

    cfg = _moe_lm(scan=True)
    optim = OptimConfig(optimizer=Muon(adam_lr=1e-2), lr=0.05, schedule="constant", warmup_steps=0)
    train = TrainConfig(steps=8, batch_size=4, optim=optim)
    tx, schedule = make_optimizer(optim, train.steps)
    state = init_state(cfg, tx, seed=0, mesh=make_mesh(MeshConfig(), jax.devices()[:1]))
    step = jax.jit(make_train_step(model_graph(cfg)[0], tx, FORWARDS.get("lm"), train, schedule))
    tokens = jax.random.randint(jax.random.key(0), (4, 17), 0, 32)
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": jnp.ones((4, 16)),
        "positions": jnp.broadcast_to(jnp.arange(16), (4, 16)),
        "segment_ids": jnp.ones((4, 16), jnp.int32),
    }
    q0 = state.params["layers"]["layers"]["self_attn"]["q"]["kernel"]
    losses = []
    for i in range(train.steps):
        state, metrics = step(state, batch, jax.random.key(i))
        losses.append(float(metrics["loss_sum"] / metrics["weight_sum"]))
    assert all(np.isfinite(losses)) and all(np.diff(losses) < 0) and losses[-1] < 0.85 * losses[0], losses
    dq = np.asarray(state.params["layers"]["layers"]["self_attn"]["q"]["kernel"] - q0)
    assert dq.shape == (1, 16, 2, 8) and np.abs(dq).max() > 0


# ---------------------------------------------------------------------------- config


def test_muon_is_registered_with_its_settings():
    assert "muon" in OPTIMIZERS.names()
    assert OptimConfig(optimizer="muon").optimizer == Muon()


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"momentum": 1.0}, r"train.optim.optimizer.momentum=1.0: must be >= 0.0 and < 1.0"),
        ({"ns_steps": 0}, r"train.optim.optimizer.ns_steps=0: must be >= 1"),
        ({"ns_steps": 2.5}, r"train.optim.optimizer.ns_steps=2.5"),
        ({"adam_lr": 0.0}, r"train.optim.optimizer.adam_lr=0.0: must be > 0.0"),
        ({"rms": -0.2}, r"train.optim.optimizer.rms=-0.2"),
    ],
)
def test_invalid_muon_fields_name_the_field(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        Muon(**kwargs)
