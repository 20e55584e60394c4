"""``bench decode``: KV-cached decoding speed, against recomputation and against PyTorch.

1. Per-token time of cached greedy decoding at positions 64 / 512 / 2,048 (the difference of 16
   and 64 new tokens after the same prompt, so the prefill cancels), with the cache sized to the
   position (p + 64 slots: 128 at position 64) and with one fixed buffer of 2,048 + 64 slots at
   every position (``fixed_over_sized``: what the unwritten slots cost), next to the time of one full
   forward pass over the same prefix (what decoding without a cache costs per token), and the
   log-log slopes of each against the position (the exponent of cost ~ p^s: the notes expect at
   most 1 with the cache sized to the position, one more for recomputation).
2. Tokens/s at batch 1 and 8 for 256 new tokens after a 1-token prompt (no EOS), measured
   alternately with ``../shared/bench/torch_gpt.py generate`` (A B A B ..., medians).
3. KV-cache bytes per token and layer of multi-head, grouped-query and multi-head latent attention
   (MLA) at the same d_model: the measured model's width and DeepSeek-V3's (``cache_bytes_table``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer_jax.core import compiler
from transformer_jax.decode import CachedLM, generate
from transformer_jax.decode.cache import rewind
from transformer_jax.models import ModelConfig, build_model, get_preset, with_changes
from transformer_jax.models.common import make_self_caches
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.train.timing import alternating_rounds


def torch_script() -> Path | None:
    """``torch_gpt.py`` beside the repository (``../shared/bench``) or under /work/shared."""
    here = Path(__file__).resolve().parents[2].parent / "shared" / "bench" / "torch_gpt.py"
    for path in (here, Path("/work/shared/bench/torch_gpt.py")):
        if path.is_file():
            return path
    return None


def _time(fn, reps: int, reduce=statistics.median) -> float:
    """Wall time of ``fn()`` (already compiled) over ``reps`` runs, reduced by ``reduce``."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return reduce(times)


def _gen(model, batch: int, prompt_len: int, new: int, *, width: int | None = None):
    """A compiled greedy generation of ``new`` tokens after ``prompt_len`` prompt tokens; the
    prompt buffer is ``width`` wide (right padding), so the cache holds ``width + new`` slots."""
    width = prompt_len if width is None else width
    prompt = np.zeros((batch, width), np.int32)
    lengths = np.full((batch,), prompt_len, np.int32)
    graphdef, *states = nnx.split(model)
    params = tuple(states)
    run = lambda: (
        generate(
            graphdef,
            params,
            prompt_BP=prompt,
            prompt_lengths_B=lengths,
            max_new_tokens=new,
        ).tokens
    )
    jax.block_until_ready(run())  # compile
    return run


def _fastest_interleaved(fns: dict, reps: int) -> dict:
    """The fastest of ``reps`` timed calls of each function, the functions called in turn within a
    rep (`train.timing.alternating_rounds`), so that a drift of the machine's speed reaches all alike."""
    timed = alternating_rounds({name: (lambda fn=fn: _time(fn, 1)) for name, fn in fns.items()}, reps)
    return {name: min(v) for name, v in timed.items()}


def per_token_times(model, positions=(64, 128, 256, 512, 1024), k=(16, 112), reps: int = 7) -> dict:
    """Per-token milliseconds of cached decoding at each position p: (time of k[1] new tokens -
    time of k[0]) / (k[1] - k[0]) after a p-token prompt, the prefill cancelling.
    ``cached_sized_ms``: a cache only p + k[1] long, what the step at position p reads in a
    generation that reaches p (the KV-cache claim's measure). ``cached_fixed_ms``: one fixed
    buffer as long as the last position plus k[1] at every p (a long generation's preallocated
    cache; with ``decode_impl=dense`` every slot is read, so it is flat by construction).
    ``recompute_ms``: one full forward over p tokens, what each token costs without a cache.
    The four generations of a position are timed in turn (`_fastest_interleaved`)."""
    graphdef, state = nnx.split(model)
    forward = compiler.jit(lambda s, x: nnx.merge(graphdef, s)(x)[0][:, -1])
    extra = k[1] - k[0]
    wide = max(positions)
    out = {"cached_sized_ms": {}, "cached_fixed_ms": {}, "recompute_ms": {}}
    for p in positions:
        gens = {}
        for name, width in (("cached_fixed_ms", wide), ("cached_sized_ms", p)):
            gens[name, "short"] = _gen(model, 1, p, k[0], width=width + extra)  # same cache length as the long run
            gens[name, "long"] = _gen(model, 1, p, k[1], width=width)
        best = _fastest_interleaved(gens, reps)
        for name in ("cached_fixed_ms", "cached_sized_ms"):
            out[name][p] = 1e3 * (best[name, "long"] - best[name, "short"]) / extra
        x = jnp.zeros((1, p), jnp.int32)
        jax.block_until_ready(forward(state, x))
        out["recompute_ms"][p] = 1e3 * _time(lambda x=x: forward(state, x), reps, min)
    return out


def _xla_cost(compiled) -> dict[str, float | None]:
    """``flops`` and ``bytes accessed`` of a compiled program (None where the backend reports none)."""
    found = compiled.cost_analysis()
    found = found[0] if isinstance(found, list | tuple) and found else found
    cost = found if isinstance(found, dict) else {}
    return {k: (float(cost[k]) if cost.get(k, -1) >= 0 else None) for k in ("flops", "bytes accessed")}


def step_costs(cfg: ModelConfig, positions: Sequence[int]) -> dict[str, dict[int, dict[str, float | None]]]:
    """XLA's ``cost_analysis()`` of one decoding step at each position p of decoder-only model
    ``cfg`` (lowered and compiled, never run): ``cached``, one new token over a KV cache of p
    written slots (a cache of exactly p + 1 slots read densely, so every slot read is written: the
    blocked kernel's data-dependent loop would be counted once); ``recompute``, one forward pass
    over the p + 1 tokens, what the step costs without a cache. Layers unrolled (a scanned stack's
    body is counted once). ``{"cached" | "recompute": {p: {"flops": .., "bytes accessed": ..}}}``."""
    cfg = with_changes(cfg, decode_impl="dense", scan_layers=False, dropout=0.0)
    model = build_model(cfg)
    lm = typing.cast(CachedLM, model)
    graphdef, state = nnx.split(model)

    def cached(state, cache, tokens_B1):
        logits_B1V, out = nnx.merge(graphdef, state)(tokens_B1, cache=cache)
        return logits_B1V[:, -1], out["cache"]

    def recompute(state, tokens_BT):
        return nnx.merge(graphdef, state)(tokens_BT)[0][:, -1]

    out: dict[str, dict[int, dict[str, float | None]]] = {"cached": {}, "recompute": {}}
    for p in positions:
        cache = jax.eval_shape(lambda p=p: rewind(lm.init_cache(1, p + 1), p))
        one = jax.ShapeDtypeStruct((1, 1), jnp.int32)
        out["cached"][int(p)] = _xla_cost(jax.jit(cached).lower(state, cache, one).compile())
        prefix = jax.ShapeDtypeStruct((1, p + 1), jnp.int32)
        out["recompute"][int(p)] = _xla_cost(jax.jit(recompute).lower(state, prefix).compile())
    return out


def loglog_slopes(times: dict) -> dict:
    """Least-squares slope of log(ms) against log(position) for each series of `per_token_times`
    (point estimates; ``transformer_jax.ablation.loglog_slope`` adds the interval and verdict)."""
    slope = lambda series: float(np.polyfit(np.log(list(series)), np.log(list(series.values())), 1)[0])
    return {
        name.removesuffix("_ms"): slope(series) if min(series.values()) > 0 else None for name, series in times.items()
    }


def jax_tokens_per_s(model, new_tokens: int, batches=(1, 8), reps: int = 3, runs=None) -> dict:
    runs = runs or {b: _gen(model, b, 1, new_tokens) for b in batches}
    return {b: b * new_tokens / _time(runs[b], reps) for b in batches}


def torch_tokens_per_s(new_tokens: int, reps: int = 3) -> dict | None:
    script = torch_script()
    if script is None:
        return None
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "generate",
            "--cfg",
            "small",
            "--new-tokens",
            str(new_tokens),
            "--reps",
            str(reps),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {1: out["tokens_per_s_b1"], 8: out["tokens_per_s_b8"]}


def cache_bytes_per_token(cfg: ModelConfig, dtype=None) -> float:
    """Bytes one layer's KV cache holds per token: the shapes ``init_cache`` allocates (not
    allocated here: ``jax.eval_shape``), keys and values of every slot, divided by the slots."""
    slots = 64
    caches = jax.eval_shape(lambda: make_self_caches(with_changes(cfg, n_layers=1), 1, 1, slots, dtype))
    return sum(x.size * x.dtype.itemsize for x in (caches[0]["self"].k_BKDS, caches[0]["self"].v_BKDS)) / slots


def cache_bytes_table(
    d_model: int, n_heads: int, *, kv_heads: int, mla: MLAConfig, head_dim: int | None = None, dtype=jnp.float32
) -> dict:
    """``{"MHA (...)": bytes, "GQA (...)": bytes, "MLA (...)": bytes}`` per token and layer at one
    width: n_heads heads of ``head_dim`` (None: d_model / n_heads) for MHA, ``kv_heads`` of them for
    GQA, ``mla``'s latent and RoPE key for MLA."""
    base = get_preset("llama_tiny", d_model=d_model, n_heads=n_heads, n_kv_heads=None, d_ff=d_model, n_layers=1)
    mha = with_changes(base, head_dim=head_dim)
    head = mha.dims.resolved_head_dim
    rows = {
        f"MHA ({n_heads} heads of {head})": mha,
        f"GQA ({kv_heads} kv heads of {head})": with_changes(mha, n_kv_heads=kv_heads),
        f"MLA (latent {mla.kv_lora_rank} + rope key {mla.qk_rope_head_dim})": dataclasses.replace(base, mla=mla),
    }
    return {name: cache_bytes_per_token(cfg, dtype) for name, cfg in rows.items()}


def cache_bytes_report(cfg: ModelConfig) -> dict:
    """`cache_bytes_table` at ``cfg``'s width (GQA with 1/4 of the heads; MLA with DeepSeek-V3's
    ratios to the head size: latent 4 Dh, RoPE key Dh / 2), float32; and at DeepSeek-V3's (d_model
    7168, 128 heads of 128 as the DeepSeek-V2 paper's MHA baseline, GQA 8 kv heads, latent 512,
    RoPE key 64), bfloat16."""
    Dh = cfg.dims.d_model // cfg.dims.n_heads
    ours = MLAConfig(kv_lora_rank=4 * Dh, qk_nope_head_dim=Dh, qk_rope_head_dim=Dh // 2, v_head_dim=Dh)
    v3 = MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    return {
        f"d_model={cfg.dims.d_model} float32": cache_bytes_table(
            cfg.dims.d_model, cfg.dims.n_heads, kv_heads=max(1, cfg.dims.n_heads // 4), mla=ours
        ),
        "d_model=7168 (DeepSeek-V3) bfloat16": cache_bytes_table(
            7168, 128, kv_heads=8, mla=v3, head_dim=128, dtype=jnp.bfloat16
        ),
    }


def bench_model(cfg: ModelConfig | None = None, max_len: int = 2048) -> ModelConfig:
    """torch_gpt.py's ``small`` model (our ``nanogpt_char``) with a position table for ``max_len``."""
    cfg = cfg if cfg is not None and cfg.kind == "decoder_lm" else get_preset("nanogpt_char")
    return with_changes(cfg, max_len=max(cfg.dims.max_len, max_len), dropout=0.0)


def bench_decode(
    cfg=None, workdir: str | None = None, *, new_tokens: int = 256, pairs: int = 3, positions=(64, 512, 2048)
) -> dict:
    """The figures of the module docstring. ``cfg``: an experiment Config whose decoder-only model
    is measured (default / other kinds: ``nanogpt_char``); ``workdir`` is unused."""
    del workdir
    model_cfg = bench_model(None if cfg is None else cfg.model, max_len=2 * max(positions) + 256)
    cache_bytes = cache_bytes_report(model_cfg)
    print(json.dumps({"kv_cache_bytes_per_token_per_layer": cache_bytes}), flush=True)
    model = build_model(model_cfg)
    times = per_token_times(model, positions, k=(16, 64))
    sized, fixed, recompute = times["cached_sized_ms"], times["cached_fixed_ms"], times["recompute_ms"]
    runs = {b: _gen(model, b, 1, new_tokens) for b in (1, 8)}
    ours, theirs = {1: [], 8: []}, {1: [], 8: []}
    for _ in range(pairs):  # A B A B ...
        for b, v in jax_tokens_per_s(model, new_tokens, runs=runs).items():
            ours[b].append(v)
        t = torch_tokens_per_s(new_tokens)
        for b in (1, 8):
            if t is not None:
                theirs[b].append(t[b])
    out = {
        "bench": "decode",
        "model": "nanogpt_char",
        "new_tokens": new_tokens,
        "pairs": pairs,
        "per_token_ms_cached_sized": sized,
        "per_token_ms_cached_fixed_buffer": fixed,
        "per_token_ms_recompute": recompute,
        "loglog_slope": loglog_slopes(times),
        "fixed_over_sized": {p: fixed[p] / sized[p] for p in positions},
        "cached_sized_ratio_last_over_first": sized[positions[-1]] / sized[positions[0]],
        "cached_fixed_buffer_ratio_last_over_first": fixed[positions[-1]] / fixed[positions[0]],
        "recompute_ratio_last_over_first": recompute[positions[-1]] / recompute[positions[0]],
        "kv_cache_bytes_per_token_per_layer": cache_bytes,
        "threads": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
    }
    for b in (1, 8):
        out[f"jax_tokens_per_s_b{b}"] = statistics.median(ours[b])
        out[f"jax_tokens_per_s_b{b}_runs"] = ours[b]
        if theirs[b]:
            out[f"torch_tokens_per_s_b{b}"] = statistics.median(theirs[b])
            out[f"torch_tokens_per_s_b{b}_runs"] = theirs[b]
            out[f"jax_over_torch_b{b}"] = out[f"jax_tokens_per_s_b{b}"] / out[f"torch_tokens_per_s_b{b}"]
    return out
