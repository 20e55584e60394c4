"""``transformer-jax translate --workdir DIR [--beam B] < source.txt > hypotheses.txt``.

Reads one source sentence per line from stdin (or ``--input``) and writes exactly one
detokenized translation per line to stdout (or ``--output``), in the input order. stdout carries
nothing else: logs, and the command's JSON summary line, go to stderr.
"""

from __future__ import annotations

import sys

from transformer_jax.cli.common import add_run_args, check_workdir
from transformer_jax.core.paths import user_path


def register(sub) -> None:
    p = sub.add_parser("translate", help="translate stdin line by line with a trained seq2seq run (beam search)")
    add_run_args(p, config=False)
    p.add_argument("--beam", type=int, default=4, help="beam width (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty exponent")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per decoding batch")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="longest translation in tokens (default: from the run's data.seq_len)",
    )
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument("--input", default="-", help="source file (default: stdin)")
    p.add_argument("--output", default="-", help="hypothesis file (default: stdout)")
    p.set_defaults(fn=run, summary_to_stderr=True)


def run(args) -> dict:
    import contextlib
    import dataclasses
    import time

    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the hypotheses only
        from transformer_jax.eval.translation import run_translate_config, search_for, translate_texts
        from transformer_jax.train.experiment import workdir_config
        from transformer_jax.train.run import setup

        check_workdir(args.workdir, create=False)
        cfg = workdir_config(args.workdir, args.set)
        run, _ = setup(cfg, args.workdir, best=args.best, restore_step=args.restore_step)
        has_checkpoint = run.checkpoints.latest_step() is not None
        run.checkpoints.close()
        if not has_checkpoint:
            raise FileNotFoundError(f"no checkpoint in {args.workdir}/checkpoints")
        if run.data.task != "seq2seq":
            raise ValueError("translate needs a seq2seq run (data.dataset=parallel); use sample for language models")
        cfg = run_translate_config(run, search=search_for(args.beam, args.alpha), batch_size=args.batch_size)
        if args.max_new_tokens is not None:
            cfg = dataclasses.replace(cfg, max_new_tokens=args.max_new_tokens)
        if args.input == "-":
            lines = [line.rstrip("\n") for line in sys.stdin]
        else:
            with user_path(args.input, "--input").open("r") as src:  # gs:// where the environment provides it
                lines = [line.rstrip("\n") for line in src]
        t0 = time.time()
        hyps = translate_texts(run.graphdef, (run.state.params, run.state.model_state), run.data.tokenizer, lines, cfg)
        seconds = time.time() - t0
    dst = out if args.output == "-" else user_path(args.output, "--output").open("w")
    dst.write("".join(h + "\n" for h in hyps))
    dst.flush()
    if dst is not out:
        dst.close()
    return {
        "sentences": len(hyps),
        "beam": args.beam,
        "alpha": args.alpha,
        "seconds": seconds,
        "sentences_per_s": len(hyps) / max(seconds, 1e-9),
    }
