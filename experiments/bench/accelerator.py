"""One GPU (or TPU): GPT-2 124M and a ~350M LLaMA-like model trained in bfloat16 with the best
attention implementation (`auto`), then greedy decoding at batch 1 and 64.

Prints per model: step time, tokens/s, MFU against the device's published bf16 peak
(`train.flops.known_peak_flops`; the FLOPs are the model formula's, 6 N + attention, with XLA's
count of the compiled step beside it), peak device memory, compile time, decode tokens/s.
About 3 minutes of device time on an H100-class GPU with the defaults.

    python experiments/bench/accelerator.py [--steps 10] [--only llama_350m] [--json OUT.json]
    python experiments/bench/accelerator.py --tiny    # the same code on CPU with tiny models (a check)

On a machine without an accelerator it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax

from transformer_jax.benchmarks.decode import jax_tokens_per_s
from transformer_jax.benchmarks.train import time_train_step
from transformer_jax.models import build_model, count_params, get_preset
from transformer_jax.train.flops import known_peak_flops, model_flops_per_token

# batch x seq_len sized for one 80 GB GPU without remat; scan keeps the 24-layer compile short.
MODELS = {
    "gpt2_124m": dict(preset="gpt2_small", batch=16, seq_len=1024, scan_layers=False),
    "llama_350m": dict(preset="llama_like", batch=8, seq_len=2048, scan_layers=True),
}
TINY = {
    "gpt2_124m": dict(preset="gpt2_tiny", batch=2, seq_len=32, scan_layers=False),
    "llama_350m": dict(preset="llama_tiny", batch=2, seq_len=32, scan_layers=True),
}
DECODE_BATCHES = (1, 64)
MIXED = dict(dtype="bfloat16", param_dtype="float32", attention_impl="auto", decode_impl="auto", dropout=0.0)


def model_config(spec: dict, new_tokens: int):
    return get_preset(
        spec["preset"], scan_layers=spec["scan_layers"], max_len=max(spec["seq_len"], 1 + new_tokens), **MIXED
    )


def peak_memory_gb() -> float | None:
    """Peak bytes in use on device 0 since the process started (None where not reported, e.g. CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


def measure(name: str, spec: dict, *, steps: int, new_tokens: int) -> dict:
    cfg = model_config(spec, new_tokens)
    B, T = spec["batch"], spec["seq_len"]
    timed = time_train_step(cfg, batch=B, seq_len=T, steps=steps, warmup=2)
    step_s = statistics.median(timed["times"])
    tokens_per_s = B * T / step_s
    flops = model_flops_per_token(cfg, T)
    peak = known_peak_flops(jax.devices()[0], "bfloat16")
    out = {
        "model": name,
        "params": count_params(cfg),
        "batch": B,
        "seq_len": T,
        "step_ms": 1e3 * step_s,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": flops,
        "xla_flops_per_token": None if timed["xla_flops"] is None else timed["xla_flops"] / (B * T),
        "peak_tflops": None if peak is None else peak / 1e12,
        "mfu": None if peak is None else tokens_per_s * flops / peak,
        "compile_s": timed["compile_s"],
        "peak_memory_gb_after_train": peak_memory_gb(),
    }
    t0 = time.perf_counter()
    decode = jax_tokens_per_s(build_model(cfg), new_tokens, batches=DECODE_BATCHES, reps=3)
    out["decode_tokens_per_s"] = {str(b): v for b, v in decode.items()}
    out["decode_s"] = time.perf_counter() - t0
    return out


def _fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def report(r: dict) -> str:
    decode = ", ".join(f"batch {b}: {v:,.0f}" for b, v in r["decode_tokens_per_s"].items())
    return "\n".join(
        [
            f"{r['model']}: {r['params'] / 1e6:.1f}M parameters, batch {r['batch']} x {r['seq_len']} tokens",
            f"  step {r['step_ms']:.1f} ms, {r['tokens_per_s']:,.0f} tokens/s, compile {r['compile_s']:.1f} s",
            f"  MFU {_fmt(r['mfu'], '.1%')} of {_fmt(r['peak_tflops'], '.0f')} TFLOP/s bf16 peak "
            f"(formula {r['flops_per_token'] / 1e9:.2f} GFLOP/token; XLA's count "
            f"{_fmt(r['xla_flops_per_token'] and r['xla_flops_per_token'] / 1e9, '.2f')})",
            f"  peak device memory {_fmt(r['peak_memory_gb_after_train'], '.1f')} GiB",
            f"  greedy decode tokens/s: {decode}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed train steps per model (after 2 warm-up steps)")
    p.add_argument("--new-tokens", type=int, default=128, help="greedy tokens per decode run")
    p.add_argument("--only", choices=sorted(MODELS), action="append", help="measure only this model (repeatable)")
    p.add_argument("--tiny", action="store_true", help="tiny models, any backend: checks the script, no figures")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    backend = jax.default_backend()
    if backend == "cpu" and not args.tiny:
        print(
            f"no accelerator: JAX's default backend is 'cpu' ({len(jax.devices())} devices); nothing to measure. "
            "Run it where `pip install -e '.[gpu]'` (or '[tpu]') finds a GPU or TPU; --tiny checks the script here."
        )
        return 0
    device = jax.devices()[0]
    print(f"{time.strftime('%Y-%m-%d')} on {device.device_kind} ({backend}), jax {jax.__version__}")
    specs = TINY if args.tiny else MODELS
    results = []
    for name in args.only or list(specs):
        r = measure(name, specs[name], steps=args.steps, new_tokens=args.new_tokens)
        print(report(r), flush=True)
        results.append(r)
    if args.json:
        doc = {"date": time.strftime("%Y-%m-%d"), "device": device.device_kind, "backend": backend, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
