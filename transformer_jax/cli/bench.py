"""``transformer-jax bench ...``: benchmarks that print figures and ratios (never tests)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: figures and ratios (not tests)")
    p.add_argument("what", choices=["data"], help="data: input pipeline vs train-step tokens/s")
    p.add_argument("--config", default="experiments/shakespeare_char.py")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.set_defaults(fn=run)


def run(args) -> dict:
    import tempfile

    from transformer_jax.benchmarks.data import bench_data
    from transformer_jax.train.experiment import load_experiment

    cfg = load_experiment(args.config, args.set)
    with tempfile.TemporaryDirectory() as workdir:
        return {"data": bench_data}[args.what](cfg, workdir)
