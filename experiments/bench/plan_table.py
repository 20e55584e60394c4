"""The table of docs/scaling.md, "Plan a run on TPUs or GPUs": what GPT-2 124M and the 336M llama
recipe need per chip, and their roofline estimates, on v5e-4, v5p-8, v6e-8 and h100x8, compiled on
this machine.

Each model is compiled with FSDP over every chip at 2 sequences per chip, with ``xla`` attention
(the T x T scores in memory) and with the platform's kernel (splash on TPU, pallas_gpu on GPU).
Layers are scanned. On TPU targets the kernel column adds the roofline bound of `train.roofline`
(XLA's FLOPs and bytes, scan corrected; the step takes at least that long), not a measurement;
GPU compiles report no FLOP or byte counts, so their rows give the memory only.

    PYTHONPATH=.cuda_aot python experiments/bench/plan_table.py [--out experiments/results/plan]

(``.cuda_aot``: the CUDA compiler plugin, installed with ``pip install -c constraints.txt
--no-deps --target .cuda_aot jax-cuda12-plugin jax-cuda12-pjrt``; libtpu from the ``tpu`` extra.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

from transformer_jax.core.targets import get_target
from transformer_jax.models import get_preset, with_changes
from transformer_jax.parallel import MeshConfig
from transformer_jax.recipes import recipe
from transformer_jax.train import aot

TARGETS = ("v5e-4", "v5p-8", "v6e-8", "h100x8")
ROWS_PER_CHIP = 2
KERNEL = {"tpu": "splash", "gpu": "pallas_gpu"}


def _configs():
    llama = recipe("pod_llama_350m")
    gpt2 = dataclasses.replace(
        llama,
        name="gpt2_124m",
        model=get_preset("gpt2_small", dtype="bfloat16", scan_layers=True, dropout=0.0, attention_impl="xla"),
        data=dataclasses.replace(llama.data, seq_len=1024),
    )
    return {"GPT-2 124M (seq 1024)": gpt2, "llama 336M (seq 2048)": llama}


def _row(name: str, cfg, target_name: str) -> dict:
    target = get_target(target_name)
    cfg = dataclasses.replace(
        cfg,
        mesh=MeshConfig(data=1, fsdp=target.chips),
        train=dataclasses.replace(cfg.train, batch_size=ROWS_PER_CHIP * target.chips),
    )
    out = {"model": name, "target": target_name, "batch": cfg.train.batch_size, "seq_len": cfg.data.seq_len}
    for label, impl in (("xla", "xla"), ("kernel", KERNEL[target.platform])):
        model = with_changes(cfg.model, attention_impl=impl)
        estimate = label == "kernel" and target.platform == "tpu"  # XLA counts FLOPs and bytes on TPU only
        report = aot.compile_train(dataclasses.replace(cfg, model=model), target, correct_scan=estimate)
        total = (report["bytes_per_device"] or {}).get("total")
        out[label] = {
            "impl": impl,
            "fits": report["fits"],
            "gib_per_chip": None if total is None else total / 2**30,
            "estimated_step_ms": None if report["estimated_step_s"] is None else 1e3 * report["estimated_step_s"],
            "estimated_mfu": report["estimated_mfu"],
            "compile_s": report["compile_s"],
        }
        print(json.dumps(out | {"done": label}), flush=True)
    return out


def _cell(r: dict, estimate: bool) -> str:
    gib = "n/a" if r["gib_per_chip"] is None else f"{r['gib_per_chip']:.1f} GiB"
    if not r["fits"]:
        return f"{gib}: **does not fit**"
    if not estimate or r["estimated_step_ms"] is None:
        return f"{gib}: fits"
    return f"{gib}: fits; step >= {r['estimated_step_ms']:.0f} ms, MFU <= {r['estimated_mfu']:.0%}"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | target | batch x seq | xla attention, per chip "
        "| splash (TPU) / pallas_gpu (GPU), per chip; TPU roofline |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        shape = f"{r['batch']} x {r['seq_len']}"
        tpu = get_target(r["target"]).platform == "tpu"
        cells = f"{_cell(r['xla'], False)} | {_cell(r['kernel'], tpu)}"
        lines.append(f"| {r['model']} | {r['target']} | {shape} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", default="experiments/results/plan", help="folder for plan_table.json and .md")
    p.add_argument("--targets", nargs="+", default=list(TARGETS))
    p.add_argument("--render", action="store_true", help="only rewrite plan_table.md from plan_table.json")
    args = p.parse_args(argv)
    if args.render:
        with open(os.path.join(args.out, "plan_table.json")) as f:
            rows = json.load(f)["rows"]
        with open(os.path.join(args.out, "plan_table.md"), "w") as f:
            f.write(markdown(rows) + "\n")
        print(markdown(rows))
        return 0
    jax.config.update("jax_enable_compilation_cache", False)
    t0 = time.time()
    rows = [_row(name, cfg, t) for t in args.targets for name, cfg in _configs().items()]
    os.makedirs(args.out, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "jax": jax.__version__, "wall_s": time.time() - t0, "rows": rows}
    with open(os.path.join(args.out, "plan_table.json"), "w") as f:
        json.dump(doc, f, indent=2)
    with open(os.path.join(args.out, "plan_table.md"), "w") as f:
        f.write(markdown(rows) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
