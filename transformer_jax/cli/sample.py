"""``transformer-jax sample``: continue a prompt (decoder-only runs) or translate it (seq2seq runs)."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args, check_workdir, refuse_unread_options
from transformer_jax.core.configlib import ConfigError

# The options each strategy reads (besides --prompt, --max-new-tokens, --seed); others are refused.
STRATEGY_READS = {
    "greedy": (),
    "sample": ("temperature",),
    "top_k": ("temperature", "top_k", "uniform_top_k"),
    "top_p": ("temperature", "top_p"),
    "beam": ("beam", "alpha"),
}
STRATEGY_OPTIONS = ("temperature", "top_k", "uniform_top_k", "top_p", "beam", "alpha")
DEFAULTS = {"temperature": 1.0, "top_k": 40, "uniform_top_k": False, "top_p": 0.9, "beam": 4, "alpha": 0.6}


def register(sub) -> None:
    p = sub.add_parser("sample", help="continue a prompt with a trained model (a seq2seq run translates it)")
    add_run_args(p, config=False)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument(
        "--strategy",
        default="top_k",
        choices=list(STRATEGY_READS),
        help="sample = temperature sampling; beam = beam search (--beam, --alpha)",
    )
    p.add_argument("--temperature", type=float, default=None, help="sample, top_k, top_p (1.0)")
    p.add_argument("--top-k", type=int, default=None, help="top_k (40)")
    p.add_argument(
        "--uniform-top-k", action="store_true", default=None, help="top_k: choose uniformly among the k best"
    )
    p.add_argument("--top-p", type=float, default=None, help="top_p (0.9)")
    p.add_argument("--beam", type=int, default=None, help="beam width of --strategy beam (4)")
    p.add_argument("--alpha", type=float, default=None, help="GNMT length penalty of --strategy beam (0.6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument(
        "--strict-prompt", action="store_true", help="refuse a prompt the tokenizer cannot represent (default: warn)"
    )
    p.set_defaults(fn=run)


def strategy_options(args) -> dict:
    """The options of ``args.strategy`` with defaults filled; an option it does not read is an error."""
    refuse_unread_options(f"--strategy {args.strategy}", args, STRATEGY_OPTIONS, STRATEGY_READS[args.strategy])
    return {k: DEFAULTS[k] if getattr(args, k) is None else getattr(args, k) for k in STRATEGY_OPTIONS}


def sample_text(
    workdir: str,
    *,
    prompt: str,
    max_new_tokens: int,
    strategy: str = "top_k",
    temperature: float = 1.0,
    top_k: int = 40,
    top_p: float = 0.9,
    seed: int = 0,
    uniform_top_k: bool = False,
    beam: int = 4,
    alpha: float = 0.6,
    best: bool = False,
    overrides: list[str] | None = None,
    translate: bool = False,
    restore_step: int | None = None,
    strict_prompt: bool = False,
) -> str | None:
    """The prompt continued by the run's latest (or best, or ``restore_step``) checkpoint:
    decoder-only runs return prompt + continuation; seq2seq runs return the translation when
    ``translate``, else None."""
    from transformer_jax.decode import SamplingConfig
    from transformer_jax.eval.sampling import sample_from
    from transformer_jax.train.entry import entry_point
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    check_workdir(workdir, create=False)
    cfg = workdir_config(workdir, overrides)
    entry = entry_point(cfg.model.kind)
    if entry is not None:
        if strategy == "beam":
            raise ConfigError(
                f"--strategy beam: a {cfg.model.kind} run samples token by token; use greedy, sample, top_k or top_p"
            )
        return entry.sample(
            workdir,
            prompt=prompt,
            max_new_tokens=max_new_tokens,
            strategy=strategy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
        )
    run, _ = setup(cfg, workdir, best=best, restore_step=restore_step)
    run.checkpoints.close()
    if run.data.task != "lm" and not translate:
        return None
    sampling = SamplingConfig(
        strategy="greedy" if strategy == "beam" else strategy,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        uniform_top_k=uniform_top_k,
    )
    return sample_from(
        run,
        run.state,
        prompt,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        beam=beam if strategy == "beam" else None,
        alpha=alpha,
        seed=seed,
        strict_prompt=strict_prompt,
    )


def run(args) -> dict:
    options = strategy_options(args)
    text = sample_text(
        args.workdir,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        strategy=args.strategy,
        seed=args.seed,
        best=args.best,
        overrides=args.set,
        translate=True,
        restore_step=args.restore_step,
        strict_prompt=args.strict_prompt,
        **options,
    )
    print(text, flush=True)
    return {"prompt": args.prompt, "text": text, "strategy": args.strategy}
