"""``transformer-jax sample``: continue a prompt with a trained decoder-only model."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args


def register(sub) -> None:
    p = sub.add_parser("sample", help="continue a prompt with a trained decoder-only model")
    add_run_args(p, config=False)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--strategy", default="top_k", choices=["greedy", "sample", "top_k", "top_p"])
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=run)


def sample_text(workdir: str, *, prompt: str, max_new_tokens: int, strategy: str = "top_k",
                temperature: float = 1.0, top_k: int = 40, top_p: float = 0.9, seed: int = 0,
                overrides: list[str] | None = None) -> str | None:
    """Continues ``prompt`` with the run's latest checkpoint (decoder-only runs)."""
    import jax
    import numpy as np

    from transformer_jax.decode import SamplingConfig, generate
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import setup

    run, _ = setup(workdir_config(workdir, overrides), workdir)
    run.checkpoints.close()
    if run.data.task != "lm":
        return None
    tok = run.data.tokenizer
    ids = tok.encode(prompt) or [tok.bos_id]
    cfg = SamplingConfig(strategy=strategy, temperature=temperature, top_k=top_k, top_p=top_p)
    params = jax.device_get((run.state.params, run.state.model_state))
    context = run.cfg.model.max_len if run.cfg.model.position == "learned" else None
    new: list[int] = []
    key = jax.random.key(seed)
    while len(new) < max_new_tokens:
        # Models with a learned position table see at most max_len tokens: continue from the
        # last half-context once the table is full (nanoGPT crops its context the same way).
        prompt_ids = (ids + new) if context is None else (ids + new)[-(context // 2 if new else context - 1):]
        room = max_new_tokens - len(new) if context is None else context - len(prompt_ids)
        out = generate(run.graphdef, params, prompt_BP=np.asarray([prompt_ids]),
                       max_new_tokens=min(room, max_new_tokens - len(new)), key=jax.random.fold_in(key, len(new)),
                       sampling=cfg, eos_id=tok.eos_id)
        chunk = np.asarray(out[0]).tolist()
        if tok.eos_id in chunk:
            new += chunk[:chunk.index(tok.eos_id)]
            break
        new += chunk
    return prompt + tok.decode(new)


def run(args) -> dict:
    text = sample_text(args.workdir, prompt=args.prompt, max_new_tokens=args.max_new_tokens, strategy=args.strategy,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                       overrides=args.set)
    if text is None:
        raise ValueError("sample needs a decoder-only (lm) run; use translate for seq2seq runs")
    print(text, flush=True)
    return {"prompt": args.prompt, "text": text, "strategy": args.strategy}
