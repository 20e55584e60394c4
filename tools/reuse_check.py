"""Runs notebooks in FULL mode with training forbidden: every arm must be read back from the committed
run store (`transformer_jax.ablation.store`), or the run stops naming the arm it would retrain.

    python tools/reuse_check.py notebooks/positional_encoding.py [more notebooks ...]

Use it after a change to configs or to the store's hashing (issue 43's acceptance: "each notebook's FULL
mode in reuse mode retrains nothing"). notebooks/decoding.py too: its MT models are run summaries
with their decodings (issue 39); it still times the KV cache where no timing is kept. The notebooks
rewrite experiments/results/*: `git checkout -- experiments/results` afterwards.
"""

import os
import runpy
import sys

os.environ["TRANSFORMER_JAX_SMOKE"] = "0"

import matplotlib

matplotlib.use("Agg")

from transformer_jax.ablation import runs


def _refuse(cfg, name, *args, **kwargs):
    raise SystemExit(f"RETRAIN NEEDED: {name}")


runs.train_curves = _refuse  # the store trains through runs.train_curves only
for notebook in sys.argv[1:]:
    runpy.run_path(notebook, run_name="__main__")
    print("REUSED ALL", notebook, flush=True)
