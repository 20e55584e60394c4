"""The packaged recipe ``shakespeare_char_moe`` (``transformer_jax/recipes/shakespeare_char_moe.py``,
documented there): ``--config experiments/shakespeare_char_moe.py`` and ``--config
shakespeare_char_moe`` train the same run. To make an experiment of your own, copy this file and
build on ``get_config()`` (``dataclasses.replace``)."""

from transformer_jax.recipes.shakespeare_char_moe import get_config

__all__ = ["get_config"]


if __name__ == "__main__":
    # Step time of the dropless MoE (E=8, top-2) against the dense model at equal active parameters
    # (same as `transformer-jax bench moe --config experiments/shakespeare_char_moe.py`):
    #   python experiments/shakespeare_char_moe.py [rounds] [steps] [dispatch ...] [--warmup N]
    import argparse
    import json

    from transformer_jax.benchmarks.moe import bench_moe

    parser = argparse.ArgumentParser(description="MoE vs dense train-step time, measured in alternation")
    parser.add_argument("rounds", type=int, nargs="?", default=10)
    parser.add_argument("steps", type=int, nargs="?", default=10, help="steps per round")
    parser.add_argument("dispatch", nargs="*", default=["auto"])
    parser.add_argument("--warmup", type=int, default=300, help="training steps before timing")
    args = parser.parse_args()
    print(
        json.dumps(
            bench_moe(
                get_config(), rounds=args.rounds, steps=args.steps, warmup=args.warmup, dispatches=tuple(args.dispatch)
            ),
            indent=1,
        )
    )
