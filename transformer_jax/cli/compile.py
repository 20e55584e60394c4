"""``transformer-jax compile``: compile a run's train step (and its generation) for a TPU or GPU
target without the hardware, and report per device the memory, whether it fits, FLOPs, the
collectives and a roofline estimate of the step time.

    transformer-jax compile --config pod_llama_350m --target v5p-8 --set mesh.fsdp=4 train.batch_size=8

A step that does not fit prints the same report and exits 2 with the bytes and what to change.
"""

from __future__ import annotations

from transformer_jax.core.configlib import ConfigError


def register(sub) -> None:
    p = sub.add_parser(
        "compile", help="compile the train step / generation for a TPU or GPU target, no hardware needed"
    )
    p.add_argument("--config", default=None, help="a recipe name (e.g. pod_llama_350m) or an experiment file")
    p.add_argument(
        "--init-from",
        default=None,
        metavar="DIR",
        help="fine-tune this base, as train --init-from DIR: a Hugging Face model directory (its config.json "
        "alone suffices: no weights are read) or a run's workdir",
    )
    p.add_argument(
        "--target",
        default=None,
        help="v4-8, v5e-4 (= v5litepod-4), v5e-16, v5p-8 ... v5p-256, v6e-8, h100x8, h200x1, a100-80gbx8, l4x1, t4x1 "
        "(default: the devices of this machine)",
    )
    p.add_argument("--slices", type=int, default=1, help="slices of the TPU target (multi-slice; data axis over DCN)")
    p.add_argument("--what", choices=("train", "decode", "both"), default="train", help="which programs to compile")
    p.add_argument("--decode-batch", type=int, default=None, help="generation batch (default: train.batch_size)")
    p.add_argument(
        "--prompt-len", type=int, default=None, help="prompt tokens (default: a quarter of model.dims.max_len)"
    )
    p.add_argument(
        "--new-tokens", type=int, default=None, help="generated tokens (default: a quarter of model.dims.max_len)"
    )
    p.add_argument(
        "--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE", help="override config fields (repeatable)"
    )
    p.set_defaults(fn=run)


def _gib(n) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def _lines(name: str, r: dict) -> list[str]:
    out = [f"{name}: {r['target']} ({r['chips']} devices, mesh {r['mesh']}), {r['params'] / 1e6:.1f}M parameters"]
    mem = r["bytes_per_device"] or {}
    parts = ", ".join(f"{k} {_gib(mem.get(k))}" for k in ("arguments", "temporaries", "outputs", "aliased", "code"))
    out.append(f"  per device: {parts}; total {_gib(mem.get('total'))}")
    verdict = "fits" if r["fits"] else "DOES NOT FIT"
    out.append(f"  device memory {_gib(r['device_memory_bytes'])}: {verdict}; compiled in {r['compile_s']:.1f} s")
    if r.get("exhausted"):
        out.append(f"  compiler: {r['exhausted']}")
    used = {k: v for k, v in (r.get("collectives") or {}).items() if v["count"]}
    coll = ", ".join(f"{k} x{v['count']} ({v['bytes'] / 2**20:.1f} MiB)" for k, v in used.items()) or "none"
    out.append(f"  collectives per step: {coll}")
    f = r.get("flops_per_step")
    if f:
        xla = "n/a" if f["xla_per_device"] is None else f"{f['xla_per_device'] / 1e12:.3f} TFLOP"
        out.append(
            f"  FLOPs per step: model formula {f['model_formula'] / 1e12:.3f} TFLOP (all devices); "
            f"XLA {xla} per device ({f['xla_source']})"
        )
    roof = r.get("roofline")
    if roof:
        out.append(
            f"  roofline estimate: compute {roof['compute_s'] * 1e3:.1f} ms, HBM {roof['hbm_s'] * 1e3:.1f} ms, "
            f"collectives {roof['collective_s'] * 1e3:.1f} ms -> step >= {r['estimated_step_s'] * 1e3:.1f} ms, "
            f"MFU <= {r['estimated_mfu']:.0%} (an estimate and a bound: each part at its peak rate, fully overlapped)"
        )
    return out


def _public(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "hlo_collectives"}


def run(args) -> dict:
    from transformer_jax.core.targets import get_target
    from transformer_jax.recipes import load_config
    from transformer_jax.train import aot

    if args.slices > 1 and args.target is None:
        raise ConfigError("--slices needs a --target (a multi-slice TPU or several GPU hosts)")
    target = None if args.target is None else get_target(args.target, slices=args.slices)
    if args.init_from is not None:
        from transformer_jax.recipes import base_config
        from transformer_jax.train.pretrained import init_from_experiment

        base = None if args.config is None else base_config(args.config)
        cfg = init_from_experiment(base, args.init_from, args.set, weights=False)
    elif args.config is not None:
        cfg = load_config(args.config, args.set)
    else:
        raise ConfigError("compile needs --config (a recipe name or an experiment file) or --init-from DIR")
    reports = {}
    if args.what in ("train", "both"):
        reports["train"] = aot.compile_train(cfg, target)
    if args.what in ("decode", "both"):
        quarter = max(1, cfg.model.dims.max_len // 4)
        reports["decode"] = aot.compile_decode(
            cfg,
            target,
            batch=args.decode_batch or cfg.train.batch_size,
            prompt_len=args.prompt_len or quarter,
            new_tokens=args.new_tokens or quarter,
        )
    for name, r in reports.items():
        print("\n".join(_lines(name, r)), flush=True)
    summary = _public(reports["train"]) if "train" in reports else _public(reports["decode"])
    if "train" in reports and "decode" in reports:
        summary["decode"] = _public(reports["decode"])
    summary["fits"] = all(r["fits"] for r in reports.values())
    if not summary["fits"]:
        from transformer_jax.train.loop import summary_line

        print(summary_line(summary), flush=True)
        bad = next(r for r in reports.values() if not r["fits"])
        need = (bad["bytes_per_device"] or {}).get("total")
        needs = "more than the chip has" if need is None else f"at least {_gib(need)} ({need} bytes)"
        have = bad.get("available_bytes", bad["device_memory_bytes"])
        changes = "; ".join(aot.what_to_change(cfg, bad))
        raise aot.DoesNotFitError(
            f"{args.config or args.init_from} does not fit {bad['target']}: a device needs {needs}, "
            f"and has {_gib(have)} ({have} bytes). Try: {changes}"
        )
    return summary
