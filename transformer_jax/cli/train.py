"""``transformer-jax train``: train (or resume) a model, then print a sample."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args


def register(sub) -> None:
    p = sub.add_parser("train", help="train (or resume) a model")
    add_run_args(p, config=True)
    p.add_argument("--sample-tokens", type=int, default=200, help="sample this many tokens at the end (0: none)")
    p.set_defaults(fn=run)


def run(args) -> dict:
    from transformer_jax.cli.sample import sample_text
    from transformer_jax.train.experiment import load_experiment
    from transformer_jax.train.loop import train

    cfg = load_experiment(args.config, args.set)
    summary = train(cfg, args.workdir)
    if args.sample_tokens:
        text = sample_text(args.workdir, prompt=cfg.train.sample_prompt, max_new_tokens=args.sample_tokens,
                           strategy="top_k", temperature=0.8, top_k=40, seed=cfg.train.seed)
        if text is not None:
            print("--- sample ---\n" + text + "\n--------------", flush=True)
    return summary
