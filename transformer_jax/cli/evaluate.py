"""``transformer-jax eval``: loss and perplexity of a trained run on a split; for translation
runs also corpus BLEU (sacrebleu) with beam search and with greedy decoding."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args, check_workdir, refuse_unread_options

BLEU_OPTIONS = ("beam", "alpha", "max_sentences", "no_bleu")  # read by translation runs only


def register(sub) -> None:
    p = sub.add_parser("eval", help="loss and perplexity of a trained run on a split (+ BLEU for translation)")
    add_run_args(p, config=False)
    p.add_argument("--split", default="val")
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument("--max-batches", type=int, default=None)
    p.add_argument("--beam", type=int, default=None, help="beam width of the reported bleu (translation runs; 4)")
    p.add_argument("--alpha", type=float, default=None, help="GNMT length penalty of the beam search (0.6)")
    p.add_argument("--max-sentences", type=int, default=None, help="BLEU on the first N sentences only")
    p.add_argument("--no-bleu", action="store_true", default=None, help="skip BLEU (translation runs)")
    p.set_defaults(fn=run)


def _check_bleu_options(args, task: str) -> None:
    reads = BLEU_OPTIONS if task == "seq2seq" else ()
    refuse_unread_options(f"eval of a {task} run (BLEU is for translation runs)", args, BLEU_OPTIONS, reads)


def run(args) -> dict:
    import time

    import jax

    from transformer_jax.eval.perplexity import split_perplexity
    from transformer_jax.train.entry import entry_point
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    check_workdir(args.workdir, create=False)
    cfg = workdir_config(args.workdir, args.set)
    entry = entry_point(cfg.model.kind)
    if entry is not None:
        _check_bleu_options(args, "count-based LM")
        return entry.evaluate(args.workdir, args.split, args.max_batches, overrides=args.set)
    _check_bleu_options(args, cfg.data.task)
    run, _ = setup(cfg, args.workdir, best=args.best, restore_step=args.restore_step)
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"no checkpoint in {args.workdir}/{'best' if args.best else 'checkpoints'}")
    split = "val" if args.split == "validation" else args.split
    if split not in run.data.splits:
        raise ValueError(f"--split {split}: this dataset has splits {', '.join(run.data.splits)}")
    result = {
        "split": split,
        "step": int(jax.device_get(run.state.step)),
        **split_perplexity(run, split, args.max_batches),
    }
    if run.data.task == "seq2seq" and not args.no_bleu:
        from transformer_jax.eval.translation import bleu_on_split, run_translate_config

        beam, alpha = args.beam or 4, 0.6 if args.alpha is None else args.alpha
        params = (run.state.params, run.state.model_state)
        bleu = {}
        for name, width in (("bleu", beam), ("bleu_greedy", 1)):
            t0 = time.time()
            cfg = run_translate_config(run, beam_size=width, alpha=alpha)
            bleu = bleu_on_split(run.graphdef, params, run.data, split, cfg, args.max_sentences)
            result[name] = bleu["bleu"]
            result[f"{name}_seconds"] = time.time() - t0
        result.update(beam=beam, alpha=alpha, bleu_sentences=bleu["sentences"], bleu_signature=bleu["signature"])
    return result
