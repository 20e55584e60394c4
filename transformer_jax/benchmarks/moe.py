"""``bench moe``: the dropless MoE train step against the dense one at equal active parameters.

The real jitted train step of each model (one device, batches of the experiment's data prefetched
in memory), timed in alternation, dense first (rounds of ``steps`` steps, medians). Each model
first trains ``warmup`` steps: a dropless step costs what the router's load imbalance makes it
cost, and the imbalance right after initialisation is not the one training sees. The MoE model
is the experiment's (``model.moe``), or, for a dense experiment, 8 experts of half the FFN width
with top-2 routing (GShard-style: renormalised gates, Switch balance loss 0.01).

Each variant also reports ``optimizer_update_ms``: the optimizer update alone (``tx.update`` and
``apply_updates`` on its parameters), timed in the same rounds. It is memory-bound and grows with
the total parameter count, which an MoE at equal active parameters multiplies.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_jax.core import compiler
from transformer_jax.models import count_params
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import BalanceLossConfig, SoftmaxRouter
from transformer_jax.train.config import Config
from transformer_jax.train.timing import alternating_rounds, prepare_step


def moe_variants(cfg: Config, dispatches=("auto",)) -> dict[str, Config]:
    """``{"dense": ..., "moe_<dispatch>": ...}``: the dense model (``model.moe=None``) and the MoE
    model with each dispatch implementation."""
    moe = cfg.model.moe or MoEConfig(
        n_experts=8,
        top_k=2,
        d_expert=(cfg.model.dims.d_ff or 4 * cfg.model.dims.d_model) // 2,
        router=SoftmaxRouter(renormalize=True),
        balance=BalanceLossConfig(loss="switch", coef=0.01),
    )
    out = {"dense": dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, moe=None))}
    for d in dispatches:
        out[f"moe_{d}"] = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, moe=dataclasses.replace(moe, dispatch=d))
        )
    return out


def time_train_steps(variants: dict[str, Config], *, rounds: int = 10, steps: int = 10, warmup: int = 300) -> dict:
    """Per-variant ``median_ms``/``min_ms`` of one train step over ``rounds`` alternating rounds,
    after ``warmup`` training steps each; MoE variants also report ``load_max_over_mean`` (per
    layer) after the warm-up."""
    prepared = {name: prepare_step(cfg, warmup=warmup) for name, cfg in variants.items()}
    out, update_times = {}, {name: [] for name in variants}
    for name, p in prepared.items():
        out[name] = {"params": count_params(p.run.cfg.model)}
        imbalance = p.metrics.get("aux_metrics/moe_load_max_over_mean")
        if imbalance is not None:
            out[name]["load_max_over_mean"] = [round(float(x), 3) for x in np.asarray(imbalance)]
    updates = {name: _optimizer_update(p.run.tx) for name, p in prepared.items()}

    def timer(name: str):
        def timed() -> float:
            seconds = prepared[name].seconds_per_step(steps)
            update_times[name].append(_time_update(updates[name], prepared[name].state, steps))
            return seconds

        return timed

    try:
        times = alternating_rounds({name: timer(name) for name in prepared}, rounds)
    finally:
        for p in prepared.values():
            p.close()
    for name, t in times.items():
        out[name].update(median_ms=1e3 * float(np.median(t)), min_ms=1e3 * float(np.min(t)))
        out[name]["optimizer_update_ms"] = 1e3 * float(np.median(update_times[name]))
    return out


def _optimizer_update(tx):
    """The step's optimizer update alone (``tx.update`` and ``apply_updates``), jitted: memory-bound,
    so its cost follows the total parameter count, which an MoE at equal active parameters multiplies."""

    def update(params, opt_state, grads):
        u, new_opt = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, u), new_opt

    return compiler.jit(update)


def _time_update(update, state, steps: int) -> float:
    """Seconds per call of `_optimizer_update` on ``state``'s parameters (gradients: 1e-3 everywhere)."""
    grads = jax.tree.map(lambda p: jnp.full_like(p, 1e-3), state.params)
    jax.block_until_ready(update(state.params, state.opt_state, grads))
    t0 = time.perf_counter()
    for _ in range(steps):
        out = update(state.params, state.opt_state, grads)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / steps


def bench_moe(
    cfg: Config,
    workdir: str | None = None,
    *,
    rounds: int = 10,
    steps: int = 10,
    warmup: int = 300,
    dispatches=("auto",),
) -> dict:
    """The module docstring's figures, with each MoE variant's ratio to the dense step."""
    del workdir
    result = time_train_steps(moe_variants(cfg, dispatches), rounds=rounds, steps=steps, warmup=warmup)
    dense = result["dense"]
    for r in result.values():
        r["ratio_to_dense_median"] = r["median_ms"] / dense["median_ms"]
        r["ratio_to_dense_min"] = r["min_ms"] / dense["min_ms"]
    return {"bench": "moe", "rounds": rounds, "steps": steps, "warmup": warmup, **result}
