"""``transformer-jax eval``: loss and perplexity of a trained run on a split (bounded by
``train.eval.batches`` unless ``--full``; for translation runs also corpus BLEU with beam search and
greedy decoding); with ``--corpus`` / ``--tasks``, perplexity and bits per byte on text files and
zero-shot multiple-choice accuracy (HellaSwag, ARC, PIQA JSONL files) of a run or, with ``--hf``, of
a Hugging Face checkpoint."""

from __future__ import annotations

import json

from transformer_jax.cli.common import add_run_args, check_workdir, refuse_unread_options
from transformer_jax.core.configlib import ConfigError

BLEU_OPTIONS = ("beam", "alpha", "max_sentences", "no_bleu")  # read by translation runs only
SPLIT_OPTIONS = ("max_batches", "full")  # read by the split evaluation only
BENCH_OPTIONS = ("batch_size", "limit", "window")  # read with --corpus / --tasks only
HF_DTYPES = ("float32", "bfloat16", "float16", "auto")


def register(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="a run's loss and perplexity on a split (+ BLEU for translation); "
        "a run's or a Hugging Face model's perplexity on text files and multiple-choice accuracy",
    )
    add_run_args(p, config=False, workdir_required=False)
    p.add_argument("--hf", default=None, metavar="DIR", help="a Hugging Face model directory instead of --workdir")
    p.add_argument("--dtype", default=None, choices=HF_DTYPES, help="--hf: parameter and compute dtype (float32)")
    p.add_argument("--split", default="val")
    p.add_argument("--best", action="store_true", default=None, help="use the best checkpoint instead of the latest")
    p.add_argument("--max-batches", type=int, default=None, help="batches of the split (default train.eval.batches)")
    p.add_argument("--full", action="store_true", default=None, help="the whole split (not train.eval.batches)")
    p.add_argument("--beam", type=int, default=None, help="beam width of the reported bleu (translation runs; 4)")
    p.add_argument("--alpha", type=float, default=None, help="GNMT length penalty of the beam search (0.6)")
    p.add_argument("--max-sentences", type=int, default=None, help="BLEU on the first N sentences only")
    p.add_argument("--no-bleu", action="store_true", default=None, help="skip BLEU (translation runs)")
    p.add_argument("--corpus", nargs="+", default=None, metavar="FILE", help="text files: perplexity, bits per byte")
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        metavar="TASK=FILE",
        help="multiple-choice JSONL files: hellaswag=FILE arc_easy=FILE arc_challenge=FILE piqa=FILE",
    )
    p.add_argument("--batch-size", type=int, default=None, help="--corpus/--tasks: sequences per batch (16)")
    p.add_argument("--limit", type=int, default=None, help="--tasks: the first N documents of each file")
    p.add_argument("--window", type=int, default=None, help="--corpus: tokens scored per window (the model's max_len)")
    p.add_argument("--output", default=None, metavar="FILE", help="also write the JSON results to FILE")
    p.set_defaults(fn=run)


def _check_bleu_options(args, task: str) -> None:
    reads = BLEU_OPTIONS if task == "seq2seq" else ()
    refuse_unread_options(f"eval of a {task} run (BLEU is for translation runs)", args, BLEU_OPTIONS, reads)


def parse_tasks(specs: list[str] | None) -> dict[str, str]:
    """``["hellaswag=FILE", ...]`` -> ``{"hellaswag": "FILE"}``; names checked against the formats."""
    from transformer_jax.core.configlib import check_choice
    from transformer_jax.eval.multiple_choice import FORMATS

    tasks: dict[str, str] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--tasks {spec!r}: give TASK=FILE, e.g. hellaswag=hellaswag_val.jsonl")
        check_choice("--tasks", name, FORMATS)
        if name in tasks:
            raise ConfigError(f"--tasks: {name} is given twice")
        tasks[name] = path
    return tasks


def _load_hf(path: str, dtype: str):
    import os

    from transformer_jax.core.paths import require_local
    from transformer_jax.data import HFTokenizer
    from transformer_jax.models.hf import from_pretrained

    path = require_local(path, "--hf", "a Hugging Face model directory is read as local files")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--hf {path}: no such directory (give a Hugging Face model directory)")
    try:
        cfg, model = from_pretrained(path, dtype=dtype)
        return cfg, model, HFTokenizer.from_pretrained(path)
    except ValueError as e:
        raise ConfigError(f"--hf {path}: {e}") from e


def _load_run(args):
    from flax import nnx

    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(
        workdir_config(args.workdir, args.set), args.workdir, best=bool(args.best), restore_step=args.restore_step
    )
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"no checkpoint in {args.workdir}/{'best' if args.best else 'checkpoints'}")
    if run.data.task != "lm":
        raise ConfigError(f"--corpus/--tasks score decoder-only language models; this run's task is {run.data.task}")
    return run.cfg.model, nnx.merge(run.graphdef, run.state.params, run.state.model_state), run.data.tokenizer


def benchmarks(args, tasks: dict[str, str]) -> dict:
    """Perplexity on ``--corpus`` and accuracy on ``--tasks`` of ``--hf`` or the ``--workdir`` run."""
    from transformer_jax.eval.corpus import corpus_metrics
    from transformer_jax.eval.loglikelihood import Scorer, context_encoder
    from transformer_jax.eval.multiple_choice import evaluate_task

    refuse_unread_options("eval --corpus/--tasks", args, BLEU_OPTIONS + SPLIT_OPTIONS, ())
    if args.hf is not None:
        if not args.set:
            args.set = None
        refuse_unread_options("eval --hf", args, ("set", "restore_step", "best"), ())
        cfg, model, tok = _load_hf(args.hf, args.dtype or "float32")
    else:
        refuse_unread_options("eval --workdir", args, ("dtype",), ())
        cfg, model, tok = _load_run(args)
    scorer = Scorer(model, max_len=cfg.dims.max_len, batch_size=16 if args.batch_size is None else args.batch_size)
    result: dict = {"model": args.hf or args.workdir}
    if args.corpus:
        result["corpus"] = corpus_metrics(scorer, tok, args.corpus, args.window)
    encode = context_encoder(tok)
    for name, path in tasks.items():
        scores = evaluate_task(scorer, encode, name, path, args.limit)
        result[name] = {k: v for k, v in scores.items() if k not in ("loglikelihoods", "golds")}
    result["compiled_lengths"] = sorted(scorer.buckets)
    return result


def run(args) -> dict:
    tasks = parse_tasks(args.tasks)
    if args.hf is not None and args.workdir is not None:
        raise ConfigError("eval takes --workdir (a run) or --hf (a Hugging Face model directory), not both")
    if args.hf is None and args.workdir is None:
        raise ConfigError("eval needs --workdir DIR (a training run) or --hf DIR (a Hugging Face model directory)")
    if args.workdir is not None:
        check_workdir(args.workdir, create=False)
    if args.hf is not None and not (tasks or args.corpus):
        raise ConfigError("eval --hf needs --corpus FILE ... and/or --tasks TASK=FILE ... (a checkpoint has no split)")
    if tasks or args.corpus:
        result = benchmarks(args, tasks)
    else:
        refuse_unread_options("eval of a split (no --corpus/--tasks)", args, BENCH_OPTIONS + ("dtype",), ())
        result = split_eval(args)
    if args.output:
        from transformer_jax.core.paths import user_path

        user_path(args.output, "--output").write_text(json.dumps(result, indent=2))  # gs:// too
    return result


def split_eval(args) -> dict:
    import time

    import jax

    from transformer_jax.eval.perplexity import split_perplexity
    from transformer_jax.train.entry import entry_point
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    cfg = workdir_config(args.workdir, args.set)
    if args.full and args.max_batches is not None:
        raise ConfigError("eval: --full covers the whole split; --max-batches bounds it: give one of them")
    max_batches = None if args.full else (args.max_batches or cfg.train.eval.batches)
    entry = entry_point(cfg.model.kind)
    if entry is not None:
        _check_bleu_options(args, "count-based LM")
        return entry.evaluate(args.workdir, args.split, max_batches, overrides=args.set)
    _check_bleu_options(args, cfg.data.task)
    run, _ = setup(cfg, args.workdir, best=bool(args.best), restore_step=args.restore_step)
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"no checkpoint in {args.workdir}/{'best' if args.best else 'checkpoints'}")
    split = "val" if args.split == "validation" else args.split
    if split not in run.data.splits:
        raise ValueError(f"--split {split}: this dataset has splits {', '.join(run.data.splits)}")
    result = {
        "split": split,
        "step": int(jax.device_get(run.state.step)),
        **split_perplexity(run, split, max_batches),
        "max_batches": max_batches,
    }
    if run.data.task == "seq2seq" and not args.no_bleu:
        from transformer_jax.eval.translation import bleu_on_split, run_translate_config, search_for

        beam, alpha = args.beam or 4, 0.6 if args.alpha is None else args.alpha
        params = (run.state.params, run.state.model_state)
        bleu = {}
        for name, width in (("bleu", beam), ("bleu_greedy", 1)):
            t0 = time.time()
            cfg = run_translate_config(run, search=search_for(width, alpha))
            bleu = bleu_on_split(run.graphdef, params, run.data, split, cfg, args.max_sentences)
            result[name] = bleu["bleu"]
            result[f"{name}_seconds"] = time.time() - t0
        result.update(beam=beam, alpha=alpha, bleu_sentences=bleu["sentences"], bleu_signature=bleu["signature"])
    return result
