"""``bench compile``: compile time of the real train step against depth, with and without scan."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from transformer_jax.core import compiler
from transformer_jax.models import get_preset
from transformer_jax.models.forward import FORWARDS
from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context
from transformer_jax.train.config import TrainConfig
from transformer_jax.train.optim import OptimConfig, make_optimizer
from transformer_jax.train.state import abstract_state, model_graph, model_infos
from transformer_jax.train.step import make_train_step

SIZES = {  # torch_gpt.py's configs
    "small": dict(d_model=128, n_heads=4, seq_len=64, batch=12),
    "medium": dict(d_model=384, n_heads=6, seq_len=256, batch=8),
}


def compile_seconds(cfg_name: str, n_layers: int, scan: bool) -> float:
    """Seconds to lower and compile one train step (shapes only; nothing is run)."""
    size = SIZES[cfg_name]
    model = get_preset(
        "nanogpt_char",
        d_model=size["d_model"],
        n_heads=size["n_heads"],
        d_ff=4 * size["d_model"],
        n_layers=n_layers,
        max_len=size["seq_len"],
        scan_layers=scan,
    )
    tc = TrainConfig(batch_size=size["batch"], optim=OptimConfig())
    tx, schedule = make_optimizer(tc.optim, tc.steps, infos=model_infos(model))
    mesh = make_mesh(MeshConfig(data=1), jax.devices()[:1])
    graphdef, _, _ = model_graph(model)
    B, T = size["batch"], size["seq_len"]
    batch = {
        k: jax.ShapeDtypeStruct((B, T), jnp.float32 if k == "weights" else jnp.int32)
        for k in ("inputs", "targets", "segment_ids", "positions", "weights")
    }
    step = make_train_step(graphdef, tx, FORWARDS.get("lm"), tc, schedule)
    with sharding_context(mesh):
        state = abstract_state(model, tx, mesh=mesh)
        t0 = time.perf_counter()
        compiler.jit(step).lower(state, batch, jax.ShapeDtypeStruct((), jax.random.key(0).dtype)).compile()
        return time.perf_counter() - t0


def bench_compile(cfg_name: str = "small", depths=(4, 12, 24, 48)) -> dict:
    """Compile seconds per depth with and without ``scan_layers``; the persistent compilation
    cache is switched off so every figure is a real compile."""
    previous = jax.config.jax_enable_compilation_cache  # pyright: ignore[reportAttributeAccessIssue]  # jax Config options are dynamic attributes, absent from its stubs
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        compile_seconds(cfg_name, 2, scan=False)  # warm up tracing/lowering machinery once, untimed
        result = {"bench": "compile", "cfg": cfg_name, "depths": list(depths), "scan_s": [], "loop_s": []}
        for depth in depths:
            result["scan_s"].append(compile_seconds(cfg_name, depth, scan=True))
            result["loop_s"].append(compile_seconds(cfg_name, depth, scan=False))
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)
    first = result["scan_s"][0]
    result["scan_growth"] = {str(d): s / first for d, s in zip(depths, result["scan_s"])}
    result["loop_growth"] = {str(d): s / result["loop_s"][0] for d, s in zip(depths, result["loop_s"])}
    return result
