"""``bench train``: the real train step of the product's DecoderLM on torch_gpt.py's configs."""

from __future__ import annotations

import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.core import compiler
from transformer_jax.models import count_params, get_preset
from transformer_jax.models.forward import FORWARDS
from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context
from transformer_jax.train.action_config import LogConfig
from transformer_jax.train.config import TrainConfig
from transformer_jax.train.flops import compiled_flops, gemm_peak_flops, model_flops_per_token
from transformer_jax.train.optim import OptimConfig, make_optimizer
from transformer_jax.train.state import init_state, model_graph, model_infos
from transformer_jax.train.step import make_train_step

CONFIGS = {  # ../shared/bench/torch_gpt.py
    "small": dict(n_layers=4, n_heads=4, d_model=128, seq_len=64, batch=12),
    "medium": dict(n_layers=6, n_heads=6, d_model=384, seq_len=256, batch=8),
}


def gpt_config(name: str, **overrides):
    """The ``nanogpt_char`` preset sized like torch_gpt.py's ``name`` config (vocab 65)."""
    c = CONFIGS[name]
    return get_preset(
        "nanogpt_char",
        vocab_size=65,
        d_model=c["d_model"],
        n_heads=c["n_heads"],
        d_ff=4 * c["d_model"],
        n_layers=c["n_layers"],
        max_len=c["seq_len"],
        **overrides,
    )


def random_lm_batches(n: int, batch: int, seq_len: int, vocab: int, seed: int = 0) -> list[dict]:
    """``n`` LM batches of uniform random tokens with the train step's fields."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (n, batch, seq_len + 1))
    shape = (batch, seq_len)
    return [
        {
            "inputs": jnp.asarray(x[:, :-1], jnp.int32),
            "targets": jnp.asarray(x[:, 1:], jnp.int32),
            "segment_ids": jnp.ones(shape, jnp.int32),
            "positions": jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.int32), shape),
            "weights": jnp.ones(shape, jnp.float32),
        }
        for x in tokens
    ]


def time_train_step(
    cfg, *, batch: int, seq_len: int, steps: int = 30, warmup: int = 3, profile: str | None = None
) -> dict:
    """Seconds of the jitted train step (AdamW, warmup + cosine, clipping) of ``cfg`` on one
    device: ``compile_s`` (first call), ``times`` (each timed step), ``xla_flops`` (of the
    compiled step, or None); ``profile``: a ``jax.profiler`` trace of the timed steps (each
    annotated ``train_step``)."""
    tc = TrainConfig(
        batch_size=batch, optim=OptimConfig(lr=1e-3, warmup_steps=100), log=LogConfig(per_layer_grad_norms=False)
    )
    tx, schedule = make_optimizer(tc.optim, 10_000, infos=model_infos(cfg))
    mesh = make_mesh(MeshConfig(data=1), jax.devices()[:1])
    graphdef, _, _ = model_graph(cfg)
    batches = random_lm_batches(steps + warmup, batch, seq_len, cfg.dims.vocab_size)
    step = compiler.jit(make_train_step(graphdef, tx, FORWARDS.get("lm"), tc, schedule), donate_argnums=(0,))
    key = jax.random.key(0)
    with sharding_context(mesh):
        state = init_state(cfg, tx, seed=0, mesh=mesh)
        t0 = time.perf_counter()
        state, _ = step(state, batches[0], key)
        jax.block_until_ready(state.params)
        compile_s = time.perf_counter() - t0
        for b in batches[1:warmup]:
            state, _ = step(state, b, key)
        jax.block_until_ready(state.params)
        xla_flops = compiled_flops(step, state, batches[0], key)
        times = []
        if profile is not None:
            jax.profiler.start_trace(profile)
        for i, b in enumerate(batches[warmup:]):
            t0 = time.perf_counter()
            with jax.profiler.StepTraceAnnotation("train_step", step_num=i):
                state, _ = step(state, b, key)
                jax.block_until_ready(state.params)
            times.append(time.perf_counter() - t0)
        if profile is not None:
            jax.profiler.stop_trace()
    return {"compile_s": compile_s, "times": times, "xla_flops": xla_flops}


def bench_train(
    name: str = "small", steps: int = 30, warmup: int = 3, profile: str | None = None, **model_overrides
) -> dict:
    """Median step time of the train step on torch_gpt.py's config ``name`` (random tokens);
    ``profile``: a directory for a trace of the timed steps. Also reports XLA's FLOPs of the
    compiled step beside the formula's."""
    c = CONFIGS[name]
    cfg = gpt_config(name, **model_overrides)
    B, T = c["batch"], c["seq_len"]
    timed = time_train_step(cfg, batch=B, seq_len=T, steps=steps, warmup=warmup, profile=profile)
    times, compile_s, xla_flops = timed["times"], timed["compile_s"], timed["xla_flops"]
    step_s = float(np.median(times))
    n_params = count_params(cfg)
    flops_per_token = model_flops_per_token(cfg, T)
    tokens_per_s = B * T / step_s
    peak = gemm_peak_flops()
    return {
        "bench": "train",
        "cfg": name,
        "step_ms": 1e3 * step_s,
        "tokens_per_s": tokens_per_s,
        "model_gflops": tokens_per_s * flops_per_token / 1e9,
        "flops_per_token": flops_per_token,
        "xla_flops_per_token": None if xla_flops is None else xla_flops / (B * T),
        "mfu": tokens_per_s * flops_per_token / peak,
        "gemm_peak_gflops": peak / 1e9,
        "compile_s": compile_s,
        "params": n_params,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "backend": jax.default_backend(),
        "devices": 1,
        **({} if profile is None else {"profile": profile}),
    }
