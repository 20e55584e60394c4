"""Command line: ``transformer-jax train | eval | sample`` (also ``python -m transformer_jax``).

Every command prints one JSON object as its last line of output.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import warnings


def load_experiment(path: str):
    """The ``Config`` returned by ``get_config()`` in an experiment file."""
    from transformer_jax.train.config import Config

    if not os.path.isfile(path):
        raise SystemExit(f"error: --config {path}: no such file (experiments live in experiments/*.py)")
    spec = importlib.util.spec_from_file_location(f"experiment_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # experiments may build on each other
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    if not hasattr(module, "get_config"):
        raise SystemExit(f"error: {path} defines no get_config() returning a transformer_jax Config")
    cfg = module.get_config()
    if not isinstance(cfg, Config):
        raise SystemExit(f"error: {path}: get_config() returned {type(cfg).__name__}, not a Config")
    return cfg


def workdir_config(workdir: str, overrides: list[str]):
    from transformer_jax import configlib
    from transformer_jax.train.config import Config

    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise SystemExit(f"error: {path} not found: is {workdir} the --workdir of a training run?")
    with open(path) as f:
        cfg = configlib.from_dict(Config, json.load(f))
    return configlib.apply_overrides(cfg, overrides)


def _quiet():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Sharding info not provided.*")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
    except ImportError:
        pass
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in ("absl", "orbax", "jax", "grain", "tensorflow_datasets"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Reading only a checkpoint's metadata is intended; Orbax warns about the other items.
    logging.getLogger("absl").addFilter(lambda record: "could not be restored" not in record.getMessage())


def cmd_train(args) -> dict:
    from transformer_jax import configlib
    from transformer_jax.train.loop import train

    cfg = configlib.apply_overrides(load_experiment(args.config), args.set)
    summary = train(cfg, args.workdir)
    if args.sample_tokens:
        text = sample_text(args.workdir, prompt=cfg.train.sample_prompt, max_new_tokens=args.sample_tokens,
                           strategy="top_k", temperature=0.8, top_k=40, seed=cfg.train.seed)
        if text is not None:
            print("--- sample ---\n" + text + "\n--------------", flush=True)
    return summary


def cmd_eval(args) -> dict:
    from transformer_jax.train.evaluate import evaluate
    from transformer_jax.train.loop import setup
    from transformer_jax.train.step import make_eval_step
    from transformer_jax.train.tasks import TASKS

    import jax

    run, _ = setup(workdir_config(args.workdir, args.set), args.workdir, best=args.best)
    if run.checkpoints.latest_step() is None:
        raise SystemExit(f"error: no checkpoint in {args.workdir}/checkpoints")
    eval_step = jax.jit(make_eval_step(run.graphdef, TASKS.get(run.data.task)))
    split = "val" if args.split == "validation" else args.split
    if split not in run.data.splits:
        raise SystemExit(f"error: --split {split}: this dataset has splits {', '.join(run.data.splits)}")
    result = evaluate(eval_step, run.state, run.data.eval_batches(split, args.max_batches), run.put_batch)
    run.checkpoints.close()
    return {"split": split, "step": int(jax.device_get(run.state.step)), **result}


def sample_text(workdir: str, *, prompt: str, max_new_tokens: int, strategy: str = "top_k",
                temperature: float = 1.0, top_k: int = 40, top_p: float = 0.9, seed: int = 0,
                overrides: list[str] | None = None) -> str | None:
    """Continues ``prompt`` with the run's latest checkpoint (decoder-only runs)."""
    import jax
    import numpy as np

    from transformer_jax.decode import SamplingConfig, generate
    from transformer_jax.train.loop import setup

    run, _ = setup(workdir_config(workdir, overrides or []), workdir)
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


def cmd_sample(args) -> dict:
    text = sample_text(args.workdir, prompt=args.prompt, max_new_tokens=args.max_new_tokens, strategy=args.strategy,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                       overrides=args.set)
    if text is None:
        raise SystemExit("error: sample needs a decoder-only (lm) run; use translate for seq2seq runs")
    print(text, flush=True)
    return {"prompt": args.prompt, "text": text, "strategy": args.strategy}


def cmd_bench(args) -> dict:
    import tempfile

    from transformer_jax import configlib
    from transformer_jax.benchmarks.data import bench_data

    cfg = configlib.apply_overrides(load_experiment(args.config), args.set)
    with tempfile.TemporaryDirectory() as workdir:
        return {"data": bench_data}[args.what](cfg, workdir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer-jax", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, config: bool):
        if config:
            p.add_argument("--config", required=True, help="experiment file, e.g. experiments/shakespeare_char.py")
        p.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics, tokenizer)")
        p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                       help="override config fields, e.g. train.steps=500 model.n_layers=8")

    p = sub.add_parser("train", help="train (or resume) a model")
    common(p, config=True)
    p.add_argument("--sample-tokens", type=int, default=200, help="sample this many tokens at the end (0: none)")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="loss and perplexity of a trained run on a split")
    common(p, config=False)
    p.add_argument("--split", default="val")
    p.add_argument("--best", action="store_true", help="use the best checkpoint instead of the latest")
    p.add_argument("--max-batches", type=int, default=None)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("sample", help="continue a prompt with a trained decoder-only model")
    common(p, config=False)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--strategy", default="top_k", choices=["greedy", "sample", "top_k", "top_p"])
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_sample)

    p = sub.add_parser("bench", help="benchmarks: figures and ratios (not tests)")
    p.add_argument("what", choices=["data"], help="data: input pipeline vs train-step tokens/s")
    p.add_argument("--config", default="experiments/shakespeare_char.py")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.set_defaults(fn=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet()
    from transformer_jax.configlib import ConfigError
    from transformer_jax.train.checkpoint import CheckpointError
    from transformer_jax.train.loop import NonFiniteError

    try:
        result = args.fn(args)
    except (ConfigError, FileNotFoundError, CheckpointError, NonFiniteError, ValueError, KeyError) as e:
        if os.environ.get("TRANSFORMER_JAX_DEBUG"):
            raise
        kind = "" if isinstance(e, (ConfigError, ValueError)) else f"{type(e).__name__}: "
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {kind}{message}\n(set TRANSFORMER_JAX_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2
    from transformer_jax.train.loop import summary_line

    print(summary_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
