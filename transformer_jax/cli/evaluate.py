"""``transformer-jax eval``: loss and perplexity of a trained run on a split."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args


def register(sub) -> None:
    p = sub.add_parser("eval", help="loss and perplexity of a trained run on a split")
    add_run_args(p, config=False)
    p.add_argument("--split", default="val")
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument("--max-batches", type=int, default=None)
    p.set_defaults(fn=run)


def run(args) -> dict:
    import jax

    from transformer_jax.train.evaluate import evaluate
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import setup
    from transformer_jax.train.step import make_eval_step
    from transformer_jax.train.tasks import TASKS

    run, _ = setup(workdir_config(args.workdir, args.set), args.workdir, best=args.best)
    if run.checkpoints.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {args.workdir}/checkpoints")
    eval_step = jax.jit(make_eval_step(run.graphdef, TASKS.get(run.data.task)))
    split = "val" if args.split == "validation" else args.split
    if split not in run.data.splits:
        raise ValueError(f"--split {split}: this dataset has splits {', '.join(run.data.splits)}")
    result = evaluate(eval_step, run.state, run.data.eval_batches(split, args.max_batches), run.put_batch)
    run.checkpoints.close()
    return {"split": split, "step": int(jax.device_get(run.state.step)), **result}
