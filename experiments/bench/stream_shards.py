"""Does streaming prepared shards keep memory flat as the corpus grows, and how fast is the loader?

Makes two corpora (``--small-mb`` and ``--mb``) as ``prepare_corpus.py`` does (the offline
Shakespeare plays, perturbed; nothing is downloaded), prepares each with the byte tokenizer and a
1% val split, then in a fresh child process per corpus and packing builds ``data.dataset=prepared``
and reads ``--batches`` training batches. Prints one JSON line per run: tokens/s of the loader, the
child's peak RSS (MB), and one line with the RSS difference between the two corpus sizes.

    python experiments/bench/stream_shards.py --small-mb 10 --mb 1000 --dir /tmp/stream_bench
    python experiments/bench/stream_shards.py --small-mb 2 --mb 20      # only shows that it works
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_corpus import make_corpus  # the same generated corpus

from transformer_jax.data import DataConfig, build_data
from transformer_jax.data.prepare import PrepareConfig, prepare


def read(path: str, packing: str, batches: int, batch_size: int, seq_len: int) -> dict:
    """In this process: tokens/s over ``batches`` training batches and the peak RSS."""
    data = build_data(
        DataConfig(dataset="prepared", path=path, seq_len=seq_len, packing=packing), batch_size=batch_size
    )
    with data.train_iterator() as it:
        next(it)
        t0 = time.perf_counter()
        tokens = sum(int(next(it)["weights"].sum()) for _ in range(batches))
        seconds = time.perf_counter() - t0
    return {
        "tokens_per_s": round(tokens / seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mb", type=float, default=1000.0, help="the large corpus in MB (default 1000)")
    p.add_argument("--small-mb", type=float, default=10.0, help="the small corpus in MB (default 10)")
    p.add_argument("--dir", default=None, help="where corpora and shards go (default: a temporary directory)")
    p.add_argument("--batches", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--workers", type=int, default=2, help="prepare's processes")
    p.add_argument("--child", nargs=2, metavar=("PATH", "PACKING"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(read(*args.child, args.batches, args.batch_size, args.seq_len)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        rss = {}
        for mb in (args.small_mb, args.mb):
            corpus = make_corpus(root / f"mb{mb:g}", mb)
            out = root / f"mb{mb:g}" / "prepared"
            shard_mb = min(64.0, max(0.1, mb / 32))
            cfg = PrepareConfig(inputs=(str(corpus),), out=str(out), tokenizer="byte", val_fraction=0.01,
                                shard_mb=shard_mb, workers=args.workers)  # fmt: skip
            prepare(cfg, progress=False)
            for packing in ("stream", "documents"):
                cmd = [sys.executable, __file__, "--child", str(out), packing, "--batches", str(args.batches),
                       "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len)]  # fmt: skip
                result = json.loads(
                    subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1]
                )
                rss[mb, packing] = result["peak_rss_mb"]
                print(json.dumps({"corpus_mb": mb, "packing": packing, **result}), flush=True)
        for packing in ("stream", "documents"):
            grown = rss[args.mb, packing] - rss[args.small_mb, packing]
            print(json.dumps({"packing": packing, "rss_growth_mb": round(grown, 1), "within_200_mb": grown <= 200}))


if __name__ == "__main__":
    main()
