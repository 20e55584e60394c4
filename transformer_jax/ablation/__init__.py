"""Helpers for ablation notebooks (``notebooks/``): sizes by mode, training runs as curves,
results with provenance, verdict tables.

A notebook runs in FULL mode by default and in SMOKE mode (tiny sizes, a few steps, results
kept in a temporary folder) when the environment variable ``TRANSFORMER_JAX_SMOKE=1`` is set,
as it is in CI::

    from transformer_jax import ablation
    steps = ablation.pick(smoke=20, full=2000)
    curves = ablation.train_curves(cfg, "postln_nowarmup")
    ablation.save_results("norm_placement", {"final": ...}, figures={"loss": fig}, configs={...})
    print(ablation.verdict_table([("Pre-LN trains without warmup", "1.62 vs 1.60", "holds")]))
"""

from transformer_jax.ablation.paths import (
    REUSE_ENV,
    SMOKE_ENV,
    START_COMMIT,
    git_commit,
    pick,
    repo_root,
    results_dir,
    runs_dir,
    smoke,
)
from transformer_jax.ablation.results import (
    GALLERY_END,
    GALLERY_START,
    VERDICTS,
    config_dict,
    gallery_markdown,
    save_results,
    update_readme_gallery,
    verdict,
    verdict_table,
)
from transformer_jax.ablation.runs import SUMMARY_FILE, Curves, eval_loss, read_curves, shakespeare_config, train_curves

__all__ = [
    "GALLERY_END",
    "GALLERY_START",
    "REUSE_ENV",
    "SMOKE_ENV",
    "START_COMMIT",
    "SUMMARY_FILE",
    "VERDICTS",
    "Curves",
    "config_dict",
    "eval_loss",
    "gallery_markdown",
    "git_commit",
    "pick",
    "read_curves",
    "repo_root",
    "results_dir",
    "runs_dir",
    "save_results",
    "shakespeare_config",
    "smoke",
    "train_curves",
    "update_readme_gallery",
    "verdict",
    "verdict_table",
]
