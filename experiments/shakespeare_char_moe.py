"""``shakespeare_char`` with Mixture-of-Experts FFNs at the dense model's ACTIVE parameter count.

The dense baseline (``experiments/shakespeare_char.py``) has FFNs of width 512. Here every layer
has 8 GELU experts of width 256, top-2 (GShard-style: renormalised gates, Switch/GShard balance
loss 0.01), dropless: 2 x 256 = 512 active hidden units per token, 4x the FFN parameters.

DeepSeekMoE-style at the same active parameters (each expert split in 4, one of the 32 shared:
1 shared + top-7 of 31 routed experts of width 64, expert-level balance loss)::

    python -m transformer_jax train --config experiments/shakespeare_char_moe.py --workdir /tmp/moe_ds \\
        --set model.moe.segments=4 model.moe.n_shared=1 model.moe.renormalize=false \\
              model.moe.balance_loss=expert

Other knobs: ``model.moe.capacity_factor=1.25`` (token dropping), ``model.moe.dispatch=ragged``,
``model.moe.bias_update_rate=1e-3`` (auxiliary-loss-free balancing), ``model.moe.every=2``, and
``mesh.expert=N model.moe.dispatch=expert_parallel`` (experts sharded over N devices).
"""

import dataclasses

from transformer_jax.models.moe_config import MoEConfig

from shakespeare_char import get_config as base_config  # noqa: E402  (experiments/ is on sys.path)


def get_config():
    cfg = base_config()
    moe = MoEConfig(n_experts=8, top_k=2, d_expert=256, renormalize=True, balance_loss="switch", balance_coef=0.01)
    return dataclasses.replace(cfg, name="shakespeare_char_moe", model=dataclasses.replace(cfg.model, moe=moe))


def _bench(variants: dict, rounds: int, steps: int, warmup: int = 0) -> dict:
    """Median seconds per real jitted train step of each config, measured in alternation (one
    device, batches prefetched in memory), as in ``transformer_jax.benchmarks.data``. Each model
    first trains ``warmup`` steps on the real data, so that its router has left the
    initialisation (a dropless MoE step costs what the load imbalance makes it cost)."""
    import tempfile
    import time

    import jax
    import numpy as np

    from transformer_jax.train.loop import setup
    from transformer_jax.train.optim import make_schedule
    from transformer_jax.train.step import make_train_step
    from transformer_jax.train.tasks import TASKS

    runs = {}
    for name, cfg in variants.items():
        run, _ = setup(cfg, tempfile.mkdtemp(prefix=f"moe_bench_{name}_"), restore=False, devices=jax.devices()[:1])
        step = jax.jit(make_train_step(run.graphdef, run.tx, TASKS.get(run.data.task), run.cfg.train,
                                       make_schedule(run.cfg.train.optim, run.cfg.train.steps)), donate_argnums=(0,))
        state = run.state
        with run.data.train_iterator() as it:
            for i in range(warmup):
                state, _ = step(state, run.put_batch(next(it)), jax.random.key(i))
            batches = [run.put_batch(next(it)) for _ in range(4)]
        state, metrics = step(state, batches[0], jax.random.key(0))
        jax.block_until_ready(state)
        imbalance = metrics.get("aux_metrics/moe_load_max_over_mean")
        if imbalance is not None:
            print(f"{name}: max/mean expert load per layer after {warmup} steps: {np.round(np.asarray(imbalance), 2)}")
        runs[name] = [run, step, batches, state]
    times = {name: [] for name in variants}
    for r in range(rounds):
        for name, entry in runs.items():
            run, step, batches, state = entry
            t0 = time.perf_counter()
            for i in range(steps):
                state, _ = step(state, batches[i % 4], jax.random.key(i))
            jax.block_until_ready(state)
            entry[3] = state
            times[name].append((time.perf_counter() - t0) / steps)
    for run, *_ in runs.values():
        run.checkpoints.close()
    return {name: {"median_ms": 1e3 * float(np.median(t)), "min_ms": 1e3 * float(np.min(t))} for name, t in times.items()}


if __name__ == "__main__":
    # Step time of the dropless MoE (E=8, top-2) against the dense model at equal active parameters:
    #   python experiments/shakespeare_char_moe.py [rounds] [steps] [dispatch ...] [--warmup N]
    import argparse
    import json

    parser = argparse.ArgumentParser(description="MoE vs dense train-step time, measured in alternation")
    parser.add_argument("rounds", type=int, nargs="?", default=10)
    parser.add_argument("steps", type=int, nargs="?", default=10, help="steps per round")
    parser.add_argument("dispatch", nargs="*", default=["auto"])
    parser.add_argument("--warmup", type=int, default=300, help="training steps before timing")
    args = parser.parse_args()
    rounds, steps, dispatches = args.rounds, args.steps, args.dispatch
    moe_cfg = get_config()
    variants = {"dense": base_config()}
    for d in dispatches:
        variants[f"moe_{d}"] = dataclasses.replace(moe_cfg, model=dataclasses.replace(
            moe_cfg.model, moe=dataclasses.replace(moe_cfg.model.moe, dispatch=d)))
    result = _bench(variants, rounds, steps, args.warmup)
    for name, r in result.items():
        r["ratio_to_dense_median"] = r["median_ms"] / result["dense"]["median_ms"]
        r["ratio_to_dense_min"] = r["min_ms"] / result["dense"]["min_ms"]
    print(json.dumps(result, indent=1))
