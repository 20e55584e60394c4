"""LoRA: adapter math, merge, only adapters train, a fine-tune that helps, adapter-only checkpoints on a base."""

import dataclasses
import os
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.variant_reads import unread_fields
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import build_model, get_preset
from transformer_jax.models.forward import FORWARDS
from transformer_jax.models.lora import (
    LoraAdapter,
    LoraConfig,
    apply_lora,
    has_lora,
    join_adapters,
    merge_lora,
    projections,
    split_adapters,
)
from transformer_jax.models.param_roles import role_table
from transformer_jax.parallel import MeshConfig, make_mesh
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.optim import AdamW, Muon, OptimConfig, make_optimizer
from transformer_jax.train.state import model_graph, state_from_model
from transformer_jax.train.step import make_train_step

ALL = ("q", "k", "v", "o", "up", "gate", "down")


def _llama(scan=False, **kw):
    kw = {"d_model": 32, "n_heads": 4, "d_ff": 48, "n_layers": 2, "vocab_size": 32, "max_len": 64, **kw}
    return get_preset("llama_tiny", scan_layers=scan, **kw)


def _tokens(seed=0, shape=(2, 12), vocab=32):
    return jax.random.randint(jax.random.key(seed), shape, 0, vocab)


def _perturb_adapters(model, seed=0, scale=0.3):
    """Random adapter factors (B is zero after apply_lora, which would hide mistakes)."""
    params = nnx.state(model, nnx.Param)
    adapters, base = split_adapters(nnx.to_pure_dict(params))
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(adapters))))
    adapters = jax.tree.map(lambda x: scale * jax.random.normal(next(keys), x.shape), adapters)
    nnx.replace_by_pure_dict(params, join_adapters(base, adapters))
    nnx.update(model, params)


# ---------------------------------------------------------------------------- config


def test_lora_config_is_validated():
    assert LoraConfig(rank=4, alpha=8, targets=("q", "down")).scale == 2.0
    with pytest.raises(ConfigError, match="train.lora.rank=0"):
        LoraConfig(rank=0)
    with pytest.raises(ConfigError, match="train.lora.alpha"):
        LoraConfig(alpha=0.0)
    with pytest.raises(ConfigError, match="unknown projection 'w_in'"):
        LoraConfig(targets=("q", "w_in"))
    with pytest.raises(ConfigError, match="non-empty tuple"):
        LoraConfig(targets=())
    with pytest.raises(ConfigError, match="twice"):
        LoraConfig(targets=("q", "q"))


def test_lora_settings_need_lora_on_and_a_base():
    with pytest.raises(ConfigError, match=r"train.lora is None \(off\).*train.lora=on"):
        apply_overrides(Config(), ["train.lora.rank=4"])
    with pytest.raises(ConfigError, match="train.lora=.*train.init_from is None"):
        apply_overrides(Config(), ["train.lora=on"])
    cfg = apply_overrides(Config(), ["train.init_from=/some/base", "train.lora=on", "train.lora.targets=q,k,v,o"])
    assert cfg.train.lora == LoraConfig(targets=("q", "k", "v", "o"))


# ---------------------------------------------------------------------------- the model


def test_projection_names_and_adapter_roles():
    model = build_model(_llama())
    assert {(p, n) for p, n, _ in projections(model) if p.startswith("layers/layers/0/")} == {
        ("layers/layers/0/self_attn/q", "q"),
        ("layers/layers/0/self_attn/k", "k"),
        ("layers/layers/0/self_attn/v", "v"),
        ("layers/layers/0/self_attn/o", "o"),
        ("layers/layers/0/ffn/w_in", "up"),
        ("layers/layers/0/ffn/w_gate", "gate"),
        ("layers/layers/0/ffn/w_out", "down"),
    }
    paths = apply_lora(model, LoraConfig(rank=2, targets=("q", "down")))
    assert paths == [f"layers/layers/{i}/{m}" for i in (0, 1) for m in ("ffn/w_out", "self_attn/q")]
    table = role_table(nnx.state(model, nnx.Param))
    adapters = sorted(p for p, info in table.items() if info.role == "adapter")
    assert adapters == sorted(f"{p}/lora/{ab}" for p in paths for ab in "ab")
    assert table["layers/layers/0/self_attn/q/kernel"].role == "hidden_matrix"  # the base keeps its role


def test_adapter_matches_numpy_formula():
    """q(x) = x W + (alpha / r) (x A) B, with W [D, H, Dh], A [D, r], B [r, H, Dh]."""
    model = build_model(_llama())
    apply_lora(model, LoraConfig(rank=3, alpha=6.0, targets=("q",)))
    _perturb_adapters(model)
    q = {path: dense for path, _, dense in projections(model)}["layers/layers/0/self_attn/q"]
    adapter = cast(LoraAdapter, q.lora)
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, 5, 32)))
    W, A, B = (np.asarray(v[...], np.float64) for v in (q.kernel, adapter.a, adapter.b))
    want = np.einsum("btd,dhk->bthk", x, W) + 2.0 * np.einsum("btr,rhk->bthk", x @ A, B)
    np.testing.assert_allclose(np.asarray(q(jnp.asarray(x))), want, rtol=1e-5, atol=1e-5)


def test_every_lora_setting_is_read_by_applying_and_running_the_adapters():
    model, cfg = build_model(_llama()), LoraConfig(rank=3, alpha=6.0, targets=("q", "down"))

    def consume():
        apply_lora(model, cfg)
        model(_tokens())

    assert unread_fields(consume, cfg) == []


@pytest.mark.parametrize("scan", [False, True])
def test_fresh_adapters_leave_the_model_unchanged_and_merge_agrees(scan):
    model = build_model(_llama(scan))
    tokens = _tokens()
    before, _ = model(tokens)
    apply_lora(model, LoraConfig(rank=4, targets=ALL), seed=3)
    after, _ = model(tokens)
    np.testing.assert_array_equal(np.asarray(after), np.asarray(before))  # B = 0
    _perturb_adapters(model)
    unmerged, _ = model(tokens)
    merged_model = merge_lora(model)
    merged, _ = merged_model(tokens)
    assert not has_lora(merged_model) and has_lora(model)
    assert float(jnp.max(jnp.abs(unmerged - before))) > 0.1  # the adapters matter...
    np.testing.assert_allclose(np.asarray(merged), np.asarray(unmerged), atol=1e-5)  # ...and merge exactly
    kernel = "layers/layers/self_attn/o/kernel" if scan else "layers/layers/0/self_attn/o/kernel"
    assert kernel in role_table(nnx.state(merged_model, nnx.Param))
    assert not any("lora" in p for p in role_table(nnx.state(merged_model, nnx.Param)))


def test_missing_targets_and_moe_experts_are_errors():
    gelu = build_model(get_preset("nanogpt_char", d_model=32, n_heads=2, d_ff=64, n_layers=1, max_len=16))
    with pytest.raises(ConfigError, match=r"no gate projection \(it has: q, k, v, o, up, down\)"):
        apply_lora(gelu, LoraConfig(targets=("q", "gate")))
    moe = build_model(get_preset("mixtral_tiny", d_model=32, n_heads=4, n_layers=1, vocab_size=32))
    with pytest.raises(ConfigError, match=r"routed MoE experts is not supported \(layers/layers/0/ffn/w_in"):
        apply_lora(moe, LoraConfig(targets=("q", "up")))
    assert apply_lora(moe, LoraConfig(targets=("q", "o"))) == [
        "layers/layers/0/self_attn/o",
        "layers/layers/0/self_attn/q",
    ]
    with pytest.raises(ConfigError, match="already has a LoRA adapter"):
        apply_lora(moe, LoraConfig(targets=("q",)))


# ---------------------------------------------------------------------------- training


def _batch(tokens):
    B, T = tokens.shape[0], tokens.shape[1] - 1
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": jnp.ones((B, T)),
        "positions": jnp.broadcast_to(jnp.arange(T), (B, T)),
        "segment_ids": jnp.ones((B, T), jnp.int32),
    }


def _trainer(model, lora: LoraConfig | None, optim: OptimConfig, steps: int):
    """(jitted step, state) for ``model`` (with adapters already attached when ``lora``)."""
    train = TrainConfig(steps=steps, batch_size=8, optim=optim, lora=lora, init_from=None if lora is None else "base")
    tx, schedule = make_optimizer(optim, steps, adapters_only=lora is not None)
    state = state_from_model(model, tx, mesh=make_mesh(MeshConfig(), jax.devices()[:1]))
    graphdef = nnx.split(model, nnx.Param, ...)[0]
    return jax.jit(make_train_step(graphdef, tx, FORWARDS.get("lm"), train, schedule)), state


@pytest.mark.parametrize("scan, optimizer", [(False, "adamw"), (True, "adamw"), (False, "muon")])
def test_only_adapters_train(scan, optimizer):
    model = build_model(_llama(scan))
    lora = LoraConfig(rank=2, targets=("q", "v", "o", "down"))
    apply_lora(model, lora)
    settings = Muon(weight_decay=0.1) if optimizer == "muon" else AdamW(weight_decay=0.1)
    optim = OptimConfig(optimizer=settings, lr=1e-2, schedule="constant", warmup_steps=0)
    step, state = _trainer(model, lora, optim, steps=3)
    adapters0, base0 = split_adapters(jax.device_get(state.params))
    for i in range(3):
        state, metrics = step(state, _batch(_tokens(i, (8, 17))), jax.random.key(i))
        assert bool(metrics["finite"])
    adapters, base = split_adapters(jax.device_get(state.params))
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(base0)[0], jax.tree.leaves(base)):
        assert np.array_equal(a, b), f"base parameter {jax.tree_util.keystr(path)} changed"
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(adapters0)[0], jax.tree.leaves(adapters)):
        assert not np.array_equal(a, b), f"adapter {jax.tree_util.keystr(path)} did not train"
    n_adapter = sum(x.size for x in jax.tree.leaves(adapters))
    n_opt = sum(np.size(x) for x in jax.tree.leaves(state.opt_state))
    assert 2 * n_adapter <= n_opt <= 2 * n_adapter + 16  # Adam moments of the adapters only (and counts)


def test_lora_fine_tune_lowers_the_loss_on_a_new_corpus():
    """A tiny LLaMA pretrained (full training) on one pattern, then LoRA-tuned 50 steps on another:
    the held-out loss on the new pattern falls well below the pretrained model's."""

    def corpus(mult, add, seed, n=8, length=33):
        start = np.random.default_rng(seed).integers(0, 32, (n, 1))
        seq = [start]
        for _ in range(length - 1):
            seq.append((seq[-1] * mult + add) % 32)
        return jnp.asarray(np.concatenate(seq, axis=1), jnp.int32)

    def constant(lr: float) -> OptimConfig:
        return OptimConfig(AdamW(weight_decay=0.0), lr=lr, schedule="constant", warmup_steps=0)

    model = build_model(_llama(), seed=0)
    step, state = _trainer(model, None, constant(1e-2), steps=30)
    for i in range(30):
        state, _ = step(state, _batch(corpus(1, 1, i)), jax.random.key(i))  # pretraining: counting
    model = nnx.merge(model_graph(_llama())[0], state.params, state.model_state)
    lora = LoraConfig(rank=4, alpha=8.0, targets=ALL)
    apply_lora(model, lora, seed=1)
    step, state = _trainer(model, lora, constant(2e-2), steps=50)
    held_out = _batch(corpus(5, 3, 999))

    def loss(state):
        m = nnx.merge(nnx.split(model, nnx.Param, ...)[0], state.params, state.model_state)
        logits, _ = m(held_out["inputs"])
        return float(jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), held_out["targets"][..., None], -1)))

    before = loss(state)
    for i in range(50):
        state, metrics = step(state, _batch(corpus(5, 3, 100 + i)), jax.random.key(i))
    after = loss(state)
    assert after < 0.5 * before, (before, after)


# ---------------------------------------------------------------------------- runs and checkpoints


@pytest.mark.slow
def test_lora_run_on_a_base_run(tmp_path):
    """A run's workdir as the base: the LoRA run's checkpoints hold the adapters alone (and the
    base's fingerprint), resume joins them with the unchanged base, and a changed base is an error."""
    from tests.cli_helpers import saved_states
    from transformer_jax.train.experiment import load_experiment
    from transformer_jax.train.loop import train
    from transformer_jax.train.pretrained import with_init_from
    from transformer_jax.train.run import setup

    experiment = os.path.join(os.path.dirname(__file__), "tiny_experiment.py")
    devices = jax.devices()[:1]
    base_dir, lora_dir = str(tmp_path / "base"), str(tmp_path / "lora")
    base_cfg = load_experiment(experiment, ["train.steps=2", "train.eval.every=100"])
    train(base_cfg, base_dir, devices=devices)
    cfg = with_init_from(load_experiment(experiment, ["train.steps=4", "train.eval.every=100"]), base_dir)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lora=LoraConfig(rank=2, targets=("q", "v"))))
    summary = train(cfg, lora_dir, devices=devices)
    assert summary["trainable_params"] == 2 * 2 * (32 * 2 + 2 * 32)  # 2 layers x q, v x (A + B)

    for name, state in saved_states(lora_dir).items():
        kinds = {info.role for info in role_table(state["params"]).values()}
        assert kinds == {"adapter"}, name
    base_run, _ = setup(base_cfg, base_dir, devices=devices)
    base_run.checkpoints.close()
    run, _ = setup(cfg, lora_dir, devices=devices)
    run.checkpoints.close()
    assert run.restored_step == 4
    adapters, base = split_adapters(jax.device_get(run.state.params))
    assert jax.tree.all(jax.tree.map(np.array_equal, base, jax.device_get(base_run.state.params)))
    assert any(np.abs(x).max() > 0 for x in jax.tree.leaves(adapters))

    state_dir = os.path.join(base_dir, "checkpoints", "2", "state")
    victim = max((os.path.join(d, f) for d, _, fs in os.walk(state_dir) for f in fs), key=os.path.getsize)
    with open(victim, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ConfigError, match=r"trained on the base .*base, which has changed since: .*size"):
        setup(cfg, lora_dir, devices=devices)
