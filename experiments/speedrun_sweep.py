"""Sweep of the speedrun recipe (``shakespeare_speedrun.py``): each named variant removes or changes
one ingredient, runs the whole command (start-up, compile and evaluation included) under a
wall-clock budget, and records final validation loss, tokens/s and wall-clock per seed in
``experiments/results/speedrun/<variant>.json``. Run on a quiet machine (nothing else running).

    python experiments/speedrun_sweep.py --variants recipe no_muon --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "speedrun"

# variant -> --set overrides on top of shakespeare_speedrun.py (the recipe itself is "recipe")
VARIANTS: dict[str, list[str]] = {
    "recipe": [],
    "no_muon": ["train.optim.optimizer=adamw", "train.optim.lr=3e-3"],
    "no_qk_norm": ["model.qk_norm=false"],
    "gelu_not_relu2": ["model.ffn=gelu"],
    "no_zero_init": ["model.zero_init_out=false"],
    "no_softcap": ["model.final_softcap=null"],
    "tied": ["model.tie_embeddings=true"],
}


def run_one(variant: str, seed: int, minutes_budget: float) -> dict:
    """One whole ``transformer-jax train`` command; returns its summary plus wall-clock seconds."""
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [
            sys.executable, "-m", "transformer_jax", "train", "--config", str(HERE / "shakespeare_speedrun.py"),
            "--workdir", workdir, "--set", f"train.seed={seed}", f"train.max_minutes={minutes_budget}",
            *VARIANTS[variant],
        ]  # fmt: skip
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            raise RuntimeError(f"{variant} seed {seed} failed:\n{out.stderr[-3000:]}")
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        curve = [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return {"seed": seed, "wall_s": wall, "summary": summary, "val": [r for r in curve if "val_loss" in r]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["recipe"], choices=sorted(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--train-minutes", type=float, default=8.5, help="train.max_minutes (training only)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        path = RESULTS / f"{variant}.json"
        record = json.loads(path.read_text()) if path.exists() else {"variant": variant, "sets": VARIANTS[variant]}
        record.setdefault("seeds", [])
        for seed in args.seeds:
            r = run_one(variant, seed, args.train_minutes)
            record["seeds"] = [s for s in record["seeds"] if s["seed"] != seed] + [r]
            path.write_text(json.dumps(record, indent=1))
            val = r["val"][-1]["val_loss"] if r["val"] else float("nan")
            print(f"{variant} seed {seed}: val_loss {val:.4f} in {r['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
