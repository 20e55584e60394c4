"""Does training on prepared shards keep memory flat as the corpus grows, and does the loader outpace
the train step?

Makes two corpora (``--small-mb`` and ``--mb``) as ``prepare_corpus.py`` does (the offline Shakespeare
plays, perturbed; nothing is downloaded) and prepares each with the byte tokenizer and a 1% val split.
Then, each in a fresh child process, for both corpora and both packings: the loader alone reads
``--batches`` batches of the ``shakespeare_char`` recipe's shape (tokens/s, peak RSS), and the
quickstart recipe trains ``--steps`` steps on the shards (the train step's tokens/s, peak RSS). Prints
one JSON line per run and one per packing with the RSS growth from the small to the large corpus and
the loader/step ratio (the acceptance: growth within 200 MB, ratio at least 10).

    python experiments/bench/stream_shards.py --small-mb 10 --mb 1000 --dir /tmp/stream_bench
    python experiments/bench/stream_shards.py --small-mb 2 --mb 20 --steps 10   # only shows that it works
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_corpus import make_corpus  # the same generated corpus

from transformer_jax.data import build_data
from transformer_jax.data.prepare import PrepareConfig, prepare
from transformer_jax.recipes import load_config

RECIPE = "shakespeare_char"


def _peak_rss_mb() -> float:
    """This process's peak RSS: Linux's VmHWM (ru_maxrss survives exec, so a child spawned by a parent of
    600 MB reported at least 600 MB), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith("VmHWM:"))
        return round(int(line.split()[1]) / 1024, 1)
    except (OSError, StopIteration):
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _sets(path: str, packing: str) -> list[str]:
    return ["data.dataset=prepared", f"data.dataset.path={path}", f"data.dataset.packing={packing}"]


def read(path: str, packing: str, batches: int) -> dict:
    """The loader alone, in this process: tokens/s over ``batches`` batches of the recipe's shape."""
    cfg = load_config(RECIPE, _sets(path, packing))
    data = build_data(cfg.data, batch_size=cfg.train.batch_size)
    with data.train_iterator() as it:
        next(it)
        t0 = time.perf_counter()
        tokens = sum(int(next(it)["weights"].sum()) for _ in range(batches))
        seconds = time.perf_counter() - t0
    return {"loader_tokens_per_s": round(tokens / seconds), "peak_rss_mb": _peak_rss_mb()}


def train(path: str, packing: str, steps: int) -> dict:
    """The recipe trained ``steps`` steps on the shards, in this process."""
    from transformer_jax.cli import main

    sets = [*_sets(path, packing), f"train.steps={steps}", f"train.eval.every={steps}", "train.eval.batches=2",
            f"train.checkpoint.every={steps}"]  # fmt: skip
    with tempfile.TemporaryDirectory() as workdir, contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["train", "--config", RECIPE, "--workdir", workdir, "--sample-tokens", "0", "--set", *sets])
    if code != 0:
        raise SystemExit(f"train exited {code}")
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    return {"step_tokens_per_s": round(summary["tokens_per_s"]), "peak_rss_mb": _peak_rss_mb()}


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mb", type=float, default=1000.0, help="the large corpus in MB (default 1000)")
    p.add_argument("--small-mb", type=float, default=10.0, help="the small corpus in MB (default 10)")
    p.add_argument("--dir", default=None, help="where corpora and shards go (default: a temporary directory)")
    p.add_argument("--batches", type=int, default=500, help="batches the loader reads (default 500)")
    p.add_argument("--steps", type=int, default=50, help="train steps (default 50)")
    p.add_argument("--workers", type=int, default=2, help="prepare's processes (default 2)")
    p.add_argument("--child", nargs=3, metavar=("KIND", "PATH", "PACKING"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        kind, path, packing = args.child
        result = read(path, packing, args.batches) if kind == "read" else train(path, packing, args.steps)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        runs: dict[tuple, dict] = {}
        for mb in (args.small_mb, args.mb):
            out = root / f"mb{mb:g}" / "prepared"
            corpus = make_corpus(root / f"mb{mb:g}", mb)
            shard_mb = min(64.0, max(0.1, mb / 32))
            cfg = PrepareConfig(inputs=(str(corpus),), out=str(out), tokenizer="byte", val_fraction=0.01,
                                shard_mb=shard_mb, workers=args.workers)  # fmt: skip
            prepare(cfg, progress=False)
            for packing in ("stream", "documents"):
                for kind in ("read", "train"):
                    extra = ["--batches", str(args.batches), "--steps", str(args.steps)]
                    runs[mb, packing, kind] = result = _child("--child", kind, str(out), packing, *extra)
                    print(json.dumps({"corpus_mb": mb, "packing": packing, "run": kind, **result}), flush=True)
        for packing in ("stream", "documents"):
            small, large = runs[args.small_mb, packing, "train"], runs[args.mb, packing, "train"]
            grown = large["peak_rss_mb"] - small["peak_rss_mb"]
            ratio = runs[args.mb, packing, "read"]["loader_tokens_per_s"] / large["step_tokens_per_s"]
            print(json.dumps({"packing": packing, "train_rss_growth_mb": round(grown, 1),
                              "within_200_mb": grown <= 200, "loader_over_step": round(ratio, 1),
                              "at_least_10x": ratio >= 10}))  # fmt: skip


if __name__ == "__main__":
    main()
