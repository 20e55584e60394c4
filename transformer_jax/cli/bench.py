"""``transformer-jax bench ...``: benchmarks that print figures and ratios (never tests)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: figures and ratios (not tests)")
    p.add_argument("what", choices=["data", "decode", "compile", "train", "moe"],
                   help="data: input pipeline vs train-step tokens/s; decode: KV-cache decoding speed vs "
                        "torch_gpt.py; compile: train-step compile time vs depth, with and without scan; "
                        "train: train-step time, tokens/s and MFU on a torch_gpt.py config; moe: the dropless "
                        "MoE train step (the config's model.moe, else 8 experts top-2) vs the dense one")
    p.add_argument("--config", default="experiments/shakespeare_char.py")
    p.add_argument("--cfg", default="small", choices=["small", "medium"], help="torch_gpt.py size (compile, train)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=None, help="timed steps (train; moe: per round)")
    p.add_argument("--warmup", type=int, default=300, help="moe: training steps before timing")
    p.add_argument("--rounds", type=int, default=10, help="moe: alternating rounds")
    p.add_argument("--dispatch", nargs="*", default=["auto"], help="moe: dispatch implementations to time")
    p.set_defaults(fn=run)


def run(args) -> dict:
    import tempfile

    if args.what == "compile":
        from transformer_jax.benchmarks.compile import bench_compile

        return bench_compile(args.cfg)
    if args.what == "train":
        from transformer_jax.benchmarks.train import bench_train

        return bench_train(args.cfg, **({} if args.steps is None else {"steps": args.steps}))
    from transformer_jax.benchmarks.data import bench_data
    from transformer_jax.benchmarks.decode import bench_decode
    from transformer_jax.train.experiment import load_experiment

    cfg = load_experiment(args.config, args.set)
    if args.what == "moe":
        from transformer_jax.benchmarks.moe import bench_moe

        return bench_moe(cfg, rounds=args.rounds, steps=args.steps or 10, warmup=args.warmup,
                         dispatches=tuple(args.dispatch))
    with tempfile.TemporaryDirectory() as workdir:
        return {"data": bench_data, "decode": bench_decode}[args.what](cfg, workdir)
