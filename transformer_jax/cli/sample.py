"""``transformer-jax sample``: continue a prompt (decoder-only runs) or translate it (seq2seq runs)."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args

STRATEGY_CHOICES = ["greedy", "sample", "top_k", "top_p", "beam"]


def register(sub) -> None:
    p = sub.add_parser("sample", help="continue a prompt with a trained model (a seq2seq run translates it)")
    add_run_args(p, config=False)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--strategy", default="top_k", choices=STRATEGY_CHOICES,
                   help="sample = temperature sampling; beam = beam search (--beam, --alpha)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--uniform-top-k", action="store_true", help="top_k: choose uniformly among the k best")
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--beam", type=int, default=4, help="beam width of --strategy beam")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty of --strategy beam")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.set_defaults(fn=run)


def _continue_lm(run, ids: list[int], *, max_new_tokens: int, strategy: str, sampling, beam: int, alpha: float,
                 seed: int) -> list[int]:
    import jax
    import numpy as np

    from transformer_jax.decode import beam_search, generate

    tok = run.data.tokenizer
    params = jax.device_get((run.state.params, run.state.model_state))
    context = run.cfg.model.max_len if run.cfg.model.position == "learned" else None
    if strategy == "beam":
        prompt = ids if context is None else ids[-(context - 1):]
        room = max_new_tokens if context is None else min(max_new_tokens, context - len(prompt))
        out = beam_search(run.graphdef, params, prompt_BP=np.asarray([prompt]), max_new_tokens=room, beam_size=beam,
                          alpha=alpha, eos_id=tok.eos_id)
        return np.asarray(out.tokens[0, 0, :int(out.lengths[0, 0])]).tolist()
    new: list[int] = []
    key = jax.random.key(seed)
    while len(new) < max_new_tokens:
        # A learned position table holds max_len positions: continue from the last half-context
        # once it is full (nanoGPT crops its context the same way).
        prompt = (ids + new) if context is None else (ids + new)[-(context // 2 if new else context - 1):]
        room = max_new_tokens - len(new) if context is None else min(context - len(prompt), max_new_tokens - len(new))
        out = generate(run.graphdef, params, prompt_BP=np.asarray([prompt]), max_new_tokens=room,
                       key=jax.random.fold_in(key, len(new)), sampling=sampling, eos_id=tok.eos_id)
        new += np.asarray(out.tokens[0, :int(out.lengths[0])]).tolist()
        if new and new[-1] == tok.eos_id:
            break
    return new


def _translate(run, text: str, *, max_new_tokens: int, strategy: str, sampling, beam: int, alpha: float,
               seed: int) -> list[int]:
    import jax
    import numpy as np

    from transformer_jax.decode import translate, translate_beam

    tok = run.data.tokenizer
    params = jax.device_get((run.state.params, run.state.model_state))
    src = np.asarray([tok.encode(text)[:run.cfg.data.max_src_len - 1] + [tok.eos_id]])
    if strategy == "beam":
        out = translate_beam(run.graphdef, params, src_BS=src, max_new_tokens=max_new_tokens, beam_size=beam,
                             alpha=alpha, bos_id=tok.bos_id, eos_id=tok.eos_id)
        return np.asarray(out.tokens[0, 0, :int(out.lengths[0, 0])]).tolist()
    out = translate(run.graphdef, params, src_BS=src, max_new_tokens=max_new_tokens, key=jax.random.key(seed),
                    sampling=sampling, bos_id=tok.bos_id, eos_id=tok.eos_id)
    return np.asarray(out.tokens[0, :int(out.lengths[0])]).tolist()


def sample_text(workdir: str, *, prompt: str, max_new_tokens: int, strategy: str = "top_k",
                temperature: float = 1.0, top_k: int = 40, top_p: float = 0.9, seed: int = 0,
                uniform_top_k: bool = False, beam: int = 4, alpha: float = 0.6, best: bool = False,
                overrides: list[str] | None = None, translate: bool = False) -> str | None:
    """The prompt continued by the run's latest (or best) checkpoint: decoder-only runs return
    prompt + continuation; seq2seq runs return the translation when ``translate``, else None."""
    from transformer_jax.decode import SamplingConfig
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import setup

    cfg = workdir_config(workdir, overrides)
    if cfg.model.kind == "ngram":
        from transformer_jax.train.ngram import sample_ngram

        if strategy == "beam":
            raise ValueError("--strategy beam: an n-gram run samples token by token; use greedy, sample, top_k or top_p")
        return sample_ngram(workdir, prompt=prompt, max_new_tokens=max_new_tokens, strategy=strategy,
                            temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    run, _ = setup(cfg, workdir, best=best)
    run.checkpoints.close()
    if run.data.task != "lm" and not translate:
        return None
    sampling = SamplingConfig(strategy="greedy" if strategy == "beam" else strategy, temperature=temperature,
                              top_k=top_k, top_p=top_p, uniform_top_k=uniform_top_k)
    kw = dict(max_new_tokens=max_new_tokens, strategy=strategy, sampling=sampling, beam=beam, alpha=alpha, seed=seed)
    tok = run.data.tokenizer
    if run.data.task == "lm":
        return prompt + tok.decode(_continue_lm(run, tok.encode(prompt) or [tok.bos_id], **kw))
    return tok.decode(_translate(run, prompt, **kw))


def run(args) -> dict:
    text = sample_text(args.workdir, prompt=args.prompt, max_new_tokens=args.max_new_tokens, strategy=args.strategy,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                       uniform_top_k=args.uniform_top_k, beam=args.beam, alpha=args.alpha, best=args.best,
                       overrides=args.set, translate=True)
    print(text, flush=True)
    return {"prompt": args.prompt, "text": text, "strategy": args.strategy}
