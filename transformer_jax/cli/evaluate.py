"""``transformer-jax eval``: loss and perplexity of a trained run on a split; for translation
runs also corpus BLEU (sacrebleu) with beam search and with greedy decoding."""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args


def register(sub) -> None:
    p = sub.add_parser("eval", help="loss and perplexity of a trained run on a split (+ BLEU for translation)")
    add_run_args(p, config=False)
    p.add_argument("--split", default="val")
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument("--max-batches", type=int, default=None)
    p.add_argument("--beam", type=int, default=4, help="beam width of the reported bleu (translation runs)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty of the beam search")
    p.add_argument("--max-sentences", type=int, default=None, help="BLEU on the first N sentences only")
    p.add_argument("--no-bleu", action="store_true", help="skip BLEU (translation runs)")
    p.set_defaults(fn=run)


def run(args) -> dict:
    import time

    import jax

    from transformer_jax.eval.perplexity import split_perplexity
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import setup

    if workdir_config(args.workdir, args.set).model.kind == "ngram":
        from transformer_jax.train.ngram import evaluate_ngram

        return evaluate_ngram(args.workdir, args.split, args.max_batches, overrides=args.set)
    run, _ = setup(workdir_config(args.workdir, args.set), args.workdir, best=args.best)
    if run.checkpoints.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {args.workdir}/checkpoints")
    run.checkpoints.close()
    split = "val" if args.split == "validation" else args.split
    if split not in run.data.splits:
        raise ValueError(f"--split {split}: this dataset has splits {', '.join(run.data.splits)}")
    result = {"split": split, "step": int(jax.device_get(run.state.step)),
              **split_perplexity(run, split, args.max_batches)}
    if run.data.task == "seq2seq" and not args.no_bleu:
        from transformer_jax.eval.translation import bleu_on_split, run_translate_config

        params = (run.state.params, run.state.model_state)
        for name, beam in (("bleu", args.beam), ("bleu_greedy", 1)):
            t0 = time.time()
            cfg = run_translate_config(run, beam_size=beam, alpha=args.alpha)
            bleu = bleu_on_split(run.graphdef, params, run.data, split, cfg, args.max_sentences)
            result[name] = bleu["bleu"]
            result[f"{name}_seconds"] = time.time() - t0
        result.update(beam=args.beam, alpha=args.alpha, bleu_sentences=bleu["sentences"],
                      bleu_signature=bleu["signature"])
    return result
