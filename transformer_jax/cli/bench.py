"""``transformer-jax bench ...``: benchmarks that print figures and ratios (never tests)."""

from __future__ import annotations

from transformer_jax.cli.common import refuse_unread_options
from transformer_jax.core import configlib

DEFAULT_CONFIG = "shakespeare_char"
# The options each benchmark reads; giving one it does not read is an error.
READS = {
    "data": ("config", "set"),
    "decode": ("config", "set", "speculative", "workdir"),
    "compile": ("cfg",),
    "train": ("cfg", "steps", "profile"),
    "moe": ("config", "set", "steps", "warmup", "rounds", "dispatch"),
}
OPTIONS = ("config", "cfg", "set", "steps", "warmup", "rounds", "dispatch", "profile", "speculative", "workdir")


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: figures and ratios (not tests)")
    p.add_argument(
        "what",
        choices=list(READS),
        help="data: input pipeline vs train-step tokens/s; decode: KV-cache decoding speed vs "
        "torch_gpt.py (--speculative: greedy drafted by the model's MTP modules vs plain greedy); "
        "compile: train-step compile time vs depth, with and without scan; "
        "train: train-step time, tokens/s and MFU on a torch_gpt.py config; moe: the dropless "
        "MoE train step (the config's model.moe, else 8 experts top-2) vs the dense one",
    )
    p.add_argument(
        "--config", default=None, help=f"recipe name or experiment file (data, decode, moe; default {DEFAULT_CONFIG})"
    )
    p.add_argument("--cfg", default=None, choices=["small", "medium"], help="torch_gpt.py size (compile, train)")
    p.add_argument("--set", action="extend", nargs="+", default=None, metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--steps", type=int, default=None, help="timed steps (train; moe: per round)")
    p.add_argument("--profile", default=None, metavar="DIR", help="train: a jax.profiler trace of the timed steps")
    p.add_argument("--warmup", type=int, default=None, help="moe: training steps before timing (300)")
    p.add_argument("--rounds", type=int, default=None, help="moe: alternating rounds (10)")
    p.add_argument(
        "--dispatch", action="extend", nargs="+", default=None, help="moe: dispatch implementations to time (auto)"
    )
    p.add_argument(
        "--speculative",
        action="store_true",
        default=None,
        help="decode: greedy drafted by the model's MTP modules vs plain greedy (acceptance rate, tokens/s)",
    )
    p.add_argument("--workdir", default=None, help="decode --speculative: measure this trained run's checkpoint")
    p.set_defaults(fn=run)


def run(args) -> dict:
    import tempfile

    refuse_unread_options(f"bench {args.what}", args, OPTIONS, READS[args.what])
    for option in ("steps", "rounds"):
        if getattr(args, option) is not None:
            configlib.check_positive(f"--{option}", getattr(args, option))
    if args.warmup is not None:
        configlib.check_positive("--warmup", args.warmup, allow_zero=True)
    cfg_size = args.cfg or "small"
    if args.what == "compile":
        from transformer_jax.benchmarks.compile import bench_compile

        return bench_compile(cfg_size)
    if args.what == "train":
        from transformer_jax.benchmarks.train import bench_train

        return bench_train(cfg_size, profile=args.profile, **({} if args.steps is None else {"steps": args.steps}))
    from transformer_jax.benchmarks.data import bench_data
    from transformer_jax.benchmarks.decode import bench_decode
    from transformer_jax.recipes import load_config

    if args.workdir is not None and not args.speculative:
        raise configlib.ConfigError("bench decode reads --workdir only with --speculative")
    if args.speculative:
        from transformer_jax.benchmarks.speculative import bench_speculative

        if args.workdir is not None and (args.config or args.set):
            raise configlib.ConfigError(
                "bench decode --speculative --workdir W measures W's own config: drop --config/--set"
            )
        cfg = None if args.workdir is not None else load_config(args.config or DEFAULT_CONFIG, args.set or [])
        return bench_speculative(cfg, args.workdir)
    cfg = load_config(args.config or DEFAULT_CONFIG, args.set or [])
    if args.what == "moe":
        from transformer_jax.benchmarks.moe import bench_moe

        return bench_moe(
            cfg,
            rounds=10 if args.rounds is None else args.rounds,
            steps=10 if args.steps is None else args.steps,
            warmup=300 if args.warmup is None else args.warmup,
            dispatches=tuple(args.dispatch or ["auto"]),
        )
    with tempfile.TemporaryDirectory() as workdir:
        return {"data": bench_data, "decode": bench_decode}[args.what](cfg, workdir)
