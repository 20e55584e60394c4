"""Our benchmarks against ``../shared/bench/torch_gpt.py``, alternating in separate processes.

For each figure the two programs run as A B A B ... (``--pairs`` pairs, at least 3), each in a
fresh process on the same machine, and the median of each side and the median ratio (ours over
theirs; higher is better for tokens/s) are printed; the last line is one JSON object::

    python -m transformer_jax.benchmarks.compare_torch                   # train small + medium, decode
    python -m transformer_jax.benchmarks.compare_torch --what train --cfg small --pairs 5

``train``: ``transformer-jax bench train --cfg C`` vs ``torch_gpt.py speed --cfg C`` (tokens/s,
step ms). ``decode``: ``transformer-jax bench decode`` already alternates with torch_gpt.py
``generate`` inside one run; it is run once here and its ratios are reported as they are.
Both sides use every core (``--threads`` for torch; XLA's default thread pool for us).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from transformer_jax.benchmarks.decode import torch_script


def last_json(cmd: list[str]) -> dict:
    """Runs ``cmd`` and parses the JSON object on the last line of its stdout."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def ours(*args: str) -> list[str]:
    return [sys.executable, "-m", "transformer_jax", "bench", *args]


def compare_train(cfg: str, pairs: int, steps: int | None) -> dict:
    torch = torch_script()
    if torch is None:
        raise SystemExit("torch_gpt.py not found (expected ../shared/bench/torch_gpt.py)")
    n = ["--steps", str(steps)] if steps else []
    mine, theirs = [], []
    for i in range(pairs):
        mine.append(last_json(ours("train", "--cfg", cfg, *n)))
        theirs.append(
            last_json([sys.executable, str(torch), "speed", "--cfg", cfg, "--threads", str(os.cpu_count()), *n])
        )
        print(
            f"train {cfg} pair {i + 1}: ours {mine[-1]['tokens_per_s']:.0f} tok/s, "
            f"torch {theirs[-1]['tokens_per_s']:.0f} tok/s",
            flush=True,
        )
    out = {"cfg": cfg, "pairs": pairs}
    for key in ("tokens_per_s", "step_ms"):
        a, b = [r[key] for r in mine], [r[key] for r in theirs]
        out[f"ours_{key}"], out[f"torch_{key}"] = statistics.median(a), statistics.median(b)
        out[f"ratio_{key}"] = statistics.median(x / y for x, y in zip(a, b))
    out["ours_mfu"] = statistics.median(r["mfu"] for r in mine)
    out["ours_compile_s"] = statistics.median(r["compile_s"] for r in mine)
    return out


def compare_decode() -> dict:
    r = last_json(ours("decode"))
    keep = [k for k in r if k.startswith(("jax_tokens_per_s_b", "torch_tokens_per_s_b", "jax_over_torch"))]
    return {"pairs": r["pairs"], **{k: r[k] for k in keep if not k.endswith("_runs")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", nargs="*", default=["train", "decode"], choices=["train", "decode"])
    p.add_argument("--cfg", nargs="*", default=["small", "medium"], choices=["small", "medium"])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="timed train steps per process (default: each side's)")
    args = p.parse_args()
    if args.pairs < 3:
        p.error("--pairs must be at least 3: single runs on a shared machine are noise")
    result = {}
    if "train" in args.what:
        for cfg in args.cfg:
            result[f"train_{cfg}"] = compare_train(cfg, args.pairs, args.steps)
    if "decode" in args.what:
        result["decode"] = compare_decode()
    for name, r in result.items():
        ratios = {k: round(v, 3) for k, v in r.items() if k.startswith(("ratio", "jax_over"))}
        print(name, ratios)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
