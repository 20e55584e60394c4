"""experiments/bench/vmap_seeds.py (its timings are benchmarks, not tests): in SMOKE mode it runs
end to end, and the vmapped step trains each seed as the step alone does."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "vmap_seeds.py"


def test_smoke_run_reports_the_figures_and_the_two_ways_agree():
    env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "TRANSFORMER_JAX_SMOKE": "1"}
    args = [sys.executable, str(SCRIPT), "--seeds", "2", "--rounds", "1", "--steps", "1"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["seeds"] == 2 and out["one_by_one_ms"] > 0 and out["vmap_ms"] > 0
    assert out["max_param_diff"] < 1e-5
