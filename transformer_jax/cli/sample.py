"""``transformer-jax sample``: continue a prompt (decoder-only runs) or translate it (seq2seq runs);
``--hf DIR`` continues it with a Hugging Face model directory and its tokenizer, no run needed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from transformer_jax.cli.common import add_run_args, check_workdir, refuse_unread_options
from transformer_jax.core.configlib import ConfigError, field_paths
from transformer_jax.core.paths import require_local

if TYPE_CHECKING:
    from transformer_jax.decode import SamplingConfig

# --strategy: a strategy of ``decode.SamplingConfig.VARIANTS`` (a test keeps them in step), or beam search.
STRATEGIES = ("greedy", "sample", "top_k", "top_p", "beam")
# The flags that set a field of the chosen strategy's settings (flag -> field); a flag whose field
# the chosen strategy lacks is refused. --beam and --alpha are beam search's.
FLAG_FIELDS = {"temperature": "temperature", "top_k": "k", "uniform_top_k": "uniform", "top_p": "p"}
BEAM_OPTIONS = ("beam", "alpha")
# --seed keys the draws of a sampling strategy; greedy and beam search draw nothing
STRATEGY_OPTIONS = (*FLAG_FIELDS, *BEAM_OPTIONS, "seed")
DETERMINISTIC = ("greedy", "beam")
RUN_OPTIONS = ("set", "restore_step", "best")  # read from a --workdir run only
HF_DTYPES = ("float32", "bfloat16", "float16", "auto")


def register(sub) -> None:
    p = sub.add_parser(
        "sample", help="continue a prompt with a trained run or a Hugging Face model (a seq2seq run translates it)"
    )
    add_run_args(p, config=False, workdir_required=False)
    p.add_argument("--hf", default=None, metavar="DIR", help="a Hugging Face model directory instead of --workdir")
    p.add_argument(
        "--dtype",
        default=None,
        choices=HF_DTYPES,
        help="--hf: parameter and compute dtype (float32; auto: the checkpoint's)",
    )
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument(
        "--strategy",
        default="top_k",
        choices=STRATEGIES,
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
    p.add_argument("--seed", type=int, default=None, help="sample, top_k, top_p: the key of the draws (0)")
    p.add_argument("--best", action="store_true", default=None, help="use the best checkpoint instead of the latest")
    p.add_argument(
        "--strict-prompt", action="store_true", help="refuse a prompt the tokenizer cannot represent (default: warn)"
    )
    p.set_defaults(fn=run)


def strategy_options(args) -> dict:
    """``sample_text``'s decoding keywords for ``args.strategy``: the chosen strategy's settings
    (``sampling``) and the ``seed`` of its draws, or ``beam`` and ``alpha``; a flag the strategy
    does not read (``--seed`` under greedy or beam search) is an error."""
    from transformer_jax.decode import SamplingConfig

    given = {o: getattr(args, o) for o in STRATEGY_OPTIONS if getattr(args, o) is not None}
    if args.strategy == "beam":
        refuse_unread_options("--strategy beam", args, STRATEGY_OPTIONS, BEAM_OPTIONS)
        return {"beam": given.get("beam", 4), "alpha": given.get("alpha", 0.6)}
    settings = SamplingConfig.VARIANTS.get(args.strategy)
    reads = tuple(o for o, f in FLAG_FIELDS.items() if f in field_paths(settings))
    draws = args.strategy not in DETERMINISTIC
    refuse_unread_options(f"--strategy {args.strategy}", args, STRATEGY_OPTIONS, reads + ("seed",) * draws)
    built = settings(**{FLAG_FIELDS[o]: v for o, v in given.items() if o in FLAG_FIELDS})
    return {"sampling": built, **({"seed": given.get("seed", 0)} if draws else {})}


def sample_text(
    workdir: str,
    *,
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    beam: int | None = None,
    alpha: float = 0.6,
    seed: int = 0,
    best: bool = False,
    overrides: list[str] | None = None,
    translate: bool = False,
    restore_step: int | None = None,
    strict_prompt: bool = False,
) -> str | None:
    """The prompt continued by the run's latest (or best, or ``restore_step``) checkpoint, token by
    token with ``sampling`` (default `TopK`), or by beam search of width ``beam`` (length penalty
    ``alpha``): decoder-only runs return prompt + continuation; seq2seq runs return the translation
    when ``translate``, else None."""
    from transformer_jax.decode import TopK
    from transformer_jax.eval.sampling import sample_from
    from transformer_jax.train.entry import entry_point
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    check_workdir(workdir, create=False)
    cfg = workdir_config(workdir, overrides)
    sampling = TopK() if sampling is None else sampling
    entry = entry_point(cfg.model.kind)
    if entry is not None:
        if beam is not None:
            raise ConfigError(
                f"--strategy beam: a {cfg.model.kind} run samples token by token; use greedy, sample, top_k or top_p"
            )
        return entry.sample(workdir, prompt=prompt, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)
    run, _ = setup(cfg, workdir, best=best, restore_step=restore_step)
    run.checkpoints.close()
    if run.data.task != "lm" and not translate:
        return None
    return sample_from(
        run,
        run.state,
        prompt,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        beam=beam,
        alpha=alpha,
        seed=seed,
        strict_prompt=strict_prompt,
    )


def sample_pretrained(
    path: str,
    *,
    prompt: str,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    beam: int | None = None,
    alpha: float = 0.6,
    seed: int = 0,
    dtype: str = "float32",
    strict_prompt: bool = False,
) -> str:
    """``prompt`` + its continuation by the Hugging Face model directory ``path`` (its tokenizer
    adds its special tokens, e.g. Llama's BOS, as ``transformers`` does); stops at its EOS.
    Decodes as `sample_text` does (``sampling``, default `TopK`; or ``beam`` and ``alpha``)."""
    import jax
    import numpy as np

    from transformer_jax.data import HFTokenizer
    from transformer_jax.decode import TopK, beam_search, generate
    from transformer_jax.eval.sampling import check_prompt
    from transformer_jax.models.hf import from_pretrained

    path = require_local(path, "--hf", "a Hugging Face model directory is read as local files")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--hf {path}: no such directory (give a Hugging Face model directory)")
    try:
        cfg, model = from_pretrained(path, dtype=dtype)
        tok = HFTokenizer.from_pretrained(path)
    except ValueError as e:
        raise ConfigError(f"--hf {path}: {e}") from e
    check_prompt(tok, prompt, strict=strict_prompt)
    ids = tok.encode(prompt, add_special_tokens=True) or [tok.bos_id]
    room = max_new_tokens if cfg.position.kind != "learned" else min(max_new_tokens, cfg.dims.max_len - len(ids))
    if room < 1:
        raise ValueError(f"--prompt is {len(ids)} tokens: no room left in the model's {cfg.dims.max_len} positions")
    prompt_BP = np.asarray([ids], np.int32)
    if beam is not None:
        out = beam_search(
            model, prompt_BP=prompt_BP, max_new_tokens=room, beam_size=beam, alpha=alpha, eos_id=tok.eos_id
        )
        new = np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])])
    else:
        gen = generate(
            model,
            prompt_BP=prompt_BP,
            max_new_tokens=room,
            key=jax.random.key(seed),
            sampling=TopK() if sampling is None else sampling,
            eos_id=tok.eos_id,
        )
        new = np.asarray(gen.tokens[0, : int(gen.lengths[0])])
    return prompt + tok.decode(new.tolist())


def run(args) -> dict:
    options = strategy_options(args)
    if args.hf is not None:
        if args.workdir is not None:
            raise ConfigError("sample takes --workdir (a run) or --hf (a Hugging Face model directory), not both")
        if not args.set:
            args.set = None
        refuse_unread_options("sample --hf", args, RUN_OPTIONS, ())
        text = sample_pretrained(
            args.hf,
            prompt=args.prompt,
            max_new_tokens=args.max_new_tokens,
            dtype=args.dtype or "float32",
            strict_prompt=args.strict_prompt,
            **options,
        )
        print(text, flush=True)
        return {"prompt": args.prompt, "text": text, "strategy": args.strategy, "hf": args.hf}
    if args.workdir is None:
        raise ConfigError("sample needs --workdir DIR (a training run) or --hf DIR (a Hugging Face model directory)")
    refuse_unread_options("sample --workdir", args, ("dtype",), ())
    text = sample_text(
        args.workdir,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        best=bool(args.best),
        overrides=args.set,
        translate=True,
        restore_step=args.restore_step,
        strict_prompt=args.strict_prompt,
        **options,
    )
    print(text, flush=True)
    return {"prompt": args.prompt, "text": text, "strategy": args.strategy}
