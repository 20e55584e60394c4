"""Helpers for ablation notebooks (``notebooks/``): sizes by mode, training runs as curves,
results with provenance, and the protocol that turns seeds into verdicts.

A notebook runs in FULL mode by default and in SMOKE mode (tiny sizes, a few steps, results
kept in a temporary folder) when the environment variable ``TRANSFORMER_JAX_SMOKE=1`` is set,
as it is in CI::

    from transformer_jax import ablation
    steps = ablation.pick(smoke=20, full=2000)
    loss = {arm: [ablation.train_curves(ablation.with_seed(cfg, s), f"{arm}_s{s}").final_or(4.2)
                  for s in ablation.seeds()] for arm, cfg in arms.items()}
    gap = ablation.paired(loss["post, no warmup"], loss["post"], expect="greater")
    rows = [ablation.row("Post-LN needs warmup", "loss(no warmup) - loss(warmup)", gap)]
    ablation.save_results("norm_placement", {"verdicts": ablation.verdict_table(rows)},
                          comparisons={"Post-LN needs warmup": gap}, seeds=ablation.seeds())

The protocol (`stats`, `protocol`): every arm runs >= 3 seeds (2 in SMOKE), arms are paired by
seed, a claim is judged by the 95% interval of the mean paired difference (t), or of a paired
bootstrap over test items for decoding methods on one model; "no worse" / "does not change"
claims by two one-sided tests against a margin stated before the run. An arm's learning rate
comes from a sweep scored on a dev split carved from the training text (`tuning`); every run
leaves a summary under ``experiments/results/<notebook>/runs/`` that a later sitting reuses
(`store.run_arm`); `probes` reads hidden-state gradients, sublayer variances and residual changes,
`norm_probes` the identity path's gradient at init, `norm_trained` builds norm_training's trained
arms and `norm_sections` runs its sections; `orders` holds the order-blind reference of a seq2seq
task (and the weaker source-bag one) and runs the reordering arms; `positions` checks two
identities of position encodings (permutation equivariance, RoPE's offset) and draws
positional_encoding's figures; `lengths` trains arms at one context and measures them at longer
ones; `decoding` the decoding notebook's measurements of a translation model; `lm_history` the
data-size corpus and the n-gram/window comparisons of
language_model_history.
Each notebook registers its claims before the run (`claims`: the notes' claim, measure, criterion,
n), and results.json keeps the specs it was judged under.
"""

from transformer_jax.ablation import (
    decoding,
    lengths,
    lm_history,
    norm_probes,
    norm_sections,
    norm_trained,
    orders,
    positions,
    probes,
    registration,
)
from transformer_jax.ablation.claims import (
    REGISTERED_AFTER_FULL_RUN,
    Claim,
    Criterion,
    Power,
    Revision,
    check_claims,
    criterion_spec,
    data_date,
    exploratory,
    register,
    spec_record,
)
from transformer_jax.ablation.orders import order_blind_loss, reorder_config, source_bag_loss, split_order_blind_loss
from transformer_jax.ablation.paths import (
    PENDING_RERUN,
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
from transformer_jax.ablation.protocol import (
    PROTOCOL,
    arm_record,
    committed_note,
    lr_grid,
    mean_text,
    pick_lr,
    row,
    seed_values,
    seeds,
    with_seed,
)
from transformer_jax.ablation.results import (
    GALLERY_END,
    GALLERY_PAGE,
    GALLERY_START,
    PREDATES,
    SMOKE_VERDICT,
    VERDICTS,
    config_dict,
    gallery_markdown,
    save_results,
    update_gallery,
    verdict,
    verdict_table,
)
from transformer_jax.ablation.runs import SUMMARY_FILE, Curves, eval_loss, read_curves, shakespeare_config, train_curves
from transformer_jax.ablation.stats import (
    Comparison,
    bleu_of_stats,
    bleu_stats,
    combine,
    decide,
    linear_fit,
    loglog_slope,
    paired,
    paired_bootstrap,
    refuting,
    t_interval,
    t_quantile,
)
from transformer_jax.ablation.store import (
    RETRAIN_ENV,
    config_hash,
    kept_measurement,
    load_run,
    run_arm,
    run_key,
    runs_store,
    save_run,
)
from transformer_jax.ablation.tuning import (
    DEV_SEED,
    dev_split,
    steps_for_seconds,
    sweep_lr,
    time_steps,
    tuned_runs,
    with_lr,
    with_optim,
    with_steps,
)

__all__ = [
    "DEV_SEED",
    "GALLERY_END",
    "GALLERY_PAGE",
    "GALLERY_START",
    "PENDING_RERUN",
    "PREDATES",
    "PROTOCOL",
    "REGISTERED_AFTER_FULL_RUN",
    "RETRAIN_ENV",
    "REUSE_ENV",
    "SMOKE_ENV",
    "SMOKE_VERDICT",
    "START_COMMIT",
    "SUMMARY_FILE",
    "VERDICTS",
    "Claim",
    "Comparison",
    "Criterion",
    "Curves",
    "Power",
    "Revision",
    "arm_record",
    "bleu_of_stats",
    "bleu_stats",
    "check_claims",
    "combine",
    "committed_note",
    "config_dict",
    "config_hash",
    "criterion_spec",
    "data_date",
    "decide",
    "decoding",
    "dev_split",
    "eval_loss",
    "exploratory",
    "gallery_markdown",
    "git_commit",
    "kept_measurement",
    "lengths",
    "linear_fit",
    "lm_history",
    "load_run",
    "loglog_slope",
    "lr_grid",
    "mean_text",
    "norm_probes",
    "norm_sections",
    "norm_trained",
    "order_blind_loss",
    "orders",
    "paired",
    "paired_bootstrap",
    "pick",
    "pick_lr",
    "positions",
    "probes",
    "read_curves",
    "refuting",
    "register",
    "registration",
    "reorder_config",
    "repo_root",
    "results_dir",
    "row",
    "run_arm",
    "run_key",
    "runs_dir",
    "runs_store",
    "save_results",
    "save_run",
    "seed_values",
    "seeds",
    "shakespeare_config",
    "smoke",
    "source_bag_loss",
    "spec_record",
    "split_order_blind_loss",
    "steps_for_seconds",
    "sweep_lr",
    "t_interval",
    "t_quantile",
    "time_steps",
    "train_curves",
    "tuned_runs",
    "update_gallery",
    "verdict",
    "verdict_table",
    "with_lr",
    "with_optim",
    "with_seed",
    "with_steps",
]
