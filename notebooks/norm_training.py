# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Post-LN, Pre-LN and DeepNorm, trained: warmup, best settings, optimizers
#
# **What the notes claim** (`000_20579b809c9e1b51.txt`; each claim in our words, with its lines, in
# the registered claims below). Post-Norm weakens the residual's identity path (measured at init in
# `norm_placement`), so it usually needs warmup and a small enough LR to converge: without warmup
# the later layers learn fast on the poor output of the earlier ones. Pre-Norm trains more easily,
# but at each one's best settings Post-Norm ends better. Adam's update is of order the LR whatever
# the gradient's size, so vanishing gradients hurt it less than SGD. DeepNorm, Norm(alpha x + F(x)),
# keeps the identity path's coefficient large. In Pre-Norm the stream grows like O(t), so a deep
# layer changes it relatively little ("wider, not deeper").
#
# **Like for like.** The notes' regime (Xavier init without a depth factor, unit-variance token
# embeddings, a separate Xavier output head: `ablation.norm_trained`), character-level
# Shakespeare, d_model 64, 12 x 64 characters a step, Adam without weight decay, SGD with momentum
# 0.9, no gradient clipping. Every LR, warmup and length is picked on a dev split carved from the
# end of the training text; the validation split is scored, on fresh seeds for the claims registered
# on 2026-12-05 (seeds 3 on, as many as each claim's n, sized from its power) and for the two whose
# criteria changed after seeds 0-2 were seen (seeds 10-12). A run "fails" when it
# diverges or ends within 0.5 nats of the unigram loss (character frequencies alone; a model there
# uses no context); a diverged run counts as ln V.
# Each verdict comes from a 95% interval over seeds (90% for "no worse", against a margin fixed
# before the run). Every run's summary is kept under `experiments/results/norm_training/runs/` and
# reused by a later sitting. `TRANSFORMER_JAX_SMOKE=1`: tiny models, one depth, 2 seeds.

# %%
# On Colab (or wherever transformer-jax is not installed yet) this cell installs it from its
# repository, at the versions of its constraints.txt, with the CUDA or TPU build of jax when the
# runtime has a GPU or TPU. For a fork or a wheel instead, set TRANSFORMER_JAX_SOURCE to its git URL
# ("git+https://github.com/YOU/transformer-jax") or path ("/content/transformer_jax-0.1.0-py3-none-any.whl").
import glob
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

if "google.colab" in sys.modules and importlib.util.find_spec("transformer_jax") is None:
    REPOSITORY = "https://github.com/transformer-jax/transformer-jax"  # pyproject.toml [project.urls]
    source = os.environ.get("TRANSFORMER_JAX_SOURCE") or f"git+{REPOSITORY}"
    if os.path.exists(source):
        source = pathlib.Path(source).resolve().as_uri()
    tpu = os.environ.get("TPU_ACCELERATOR_TYPE") or glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
    extra = "[gpu]" if shutil.which("nvidia-smi") else "[tpu]" if tpu else ""
    constraints = f"{REPOSITORY}/raw/main/constraints.txt"
    pip = [sys.executable, "-m", "pip", "install", "-q", "-c", constraints, f"transformer-jax{extra} @ {source}"]
    subprocess.run(pip, check=True)

# %%
import math

import jax
import matplotlib.pyplot as plt

from transformer_jax import ablation

NOTEBOOK = "norm_training"
STEPS = ablation.pick(smoke=10, full=1000)
SEEDS = ablation.seeds()
SHALLOW, DEEP = ablation.pick(smoke=(2, 2), full=(6, 18))
WARMUP = ablation.pick(smoke=3, full=100)
WARMUP_LRS = ablation.pick(smoke=(1e-3,), full=(1e-3, 3e-3))
SCAN_DEPTHS = ablation.pick(smoke=(2,), full=(18, 12, 9))  # deepest first, until Post-LN trains with warmup
SCAN_LRS = ablation.pick(smoke=(1e-3,), full=(1e-4, 3e-4, 1e-3))  # where 18-layer Post-LN may train
SCAN_WARMUPS = ablation.pick(smoke=(3, 6), full=(100, 500))
ADAM_GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
PLATEAU_STEPS = ablation.pick(smoke=(5, 10), full=(1000, 2000, 3000, 4000, 5000))  # Post vs Pre: candidate lengths
PLATEAU_EVERY = ablation.pick(smoke=1, full=200)
DEV_SEEDS = ablation.pick(smoke=(0, 1), full=(0, 1, 2))  # Adam vs SGD: LRs by the mean over these dev seeds
RESCUE_GRID = ablation.pick(smoke=[1e-3, 3e-3], full=[1e-3, 3e-3, 1e-2])
FAIL_MARGIN = 0.5  # a run "fails" when it diverges or ends within 0.5 nats of the unigram loss (no context used)
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %% [markdown]
# ## Claims, registered
# Each verdict's claim, measure, criterion (and why, and what would refute it) and n, fixed before
# the run that judges it (`ablation.Claim`; results.json keeps them, and a test compares them with
# the committed results'). A criterion changed after numbers were seen keeps the change in its
# `history`, and its row stays exploratory until rerun on new data. A `check` is never a verdict.

# %%
REGISTERED = ablation.REGISTERED_AFTER_FULL_RUN
POWER = {  # n per claim from its pilot's paired sd, at the alpha of the verdict's test (0.025 per side of 95%)
    "warmup": ablation.Power(  # at 0.05, as registered before its first run (seeds 3-5 trained 2026-12-05)
        0.728,
        1.0,
        "committed 6-layer Post-LN runs at lr 3e-3, seeds 0-2: sd of loss(no warmup) - loss(warmup), one seed "
        "of three having failed without warmup; 1 nat: a trained 18-layer model (2.2-2.3) against the unigram "
        "loss (3.3)",
        alpha=0.05,
    ),
    "versus": ablation.Power(
        0.0144, 0.02, "committed 1,000-step 6-layer runs at the dev picks, seeds 0-2: sd of loss(post) - loss(pre)"
    ),
    "optimizers": ablation.Power(
        0.089,
        0.15,
        "committed 6-layer runs with SGD one grid step below its pick, seeds 0-2: sd of the same difference",
    ),
    "rescue": ablation.Power(
        0.054,
        0.5,
        "the 2026-12-04 runs at 18 layers, lr 1e-3, seeds 0-2 (seen before the criterion changed): sd of "
        "loss(DeepNorm) - loss(Post-LN); 0.5 nats: the failure margin, the least move off the failure a rescue makes",
    ),
    "change": ablation.Power(
        0.0175,
        0.25,
        "the 2026-12-04 Pre-LN runs at 18 layers, lr 1e-3, seeds 0-2 (seen before the criterion changed): sd of "
        "the per-seed slope; 0.25: a quarter of the slope -1 that the notes' x_t = O(t) gives",
    ),
}
FIRST = {"rescue": 10, "change": 10}  # past seeds 3-9, which other claims' runs use: only this rerun dates them
resized = lambda key, before, why: ablation.Revision(  # the fresh seeds (3 on) as many as the new n
    "2026-12-06",
    f"n {before} -> {POWER[key].n()}: its Power at the one-sided alpha 0.025 of the verdict's two-sided 95% interval, "
    "not 0.05; fresh seeds 3 on, as many as n",
    f"the calculation had used alpha 0.05, which the verdict's interval does not apply; changed before the FULL runs "
    f"that judge the claim: {why}",
)
SIZED = ablation.Revision(  # the n of the two reruns on fresh seeds 10-12
    "2026-12-06",
    "a power calculation sizes n (Power: sd from seeds 0-2, the effect and why in it)",
    "issue 39 asks for n sized from a pilot's variance; seeds 0-2 serve as the pilot of the fresh rerun, "
    "registered before it ran",
)
claim = lambda name, **kw: ablation.Claim(
    name, **{"notes": "000_20579b809c9e1b51.txt", "n": 3, "history": (REGISTERED,), **kw}
)
CLAIMS = ablation.register(
    claim(
        "Warmup is what lets deep Post-LN train",
        lines=(141, 145),
        says="without warmup the later layers learn fast on the poor output of the earlier ones, whose gradients "
        "vanish, so the model sticks in a poor optimum or its loss diverges to NaN; warmup holds the later layers "
        "back while the earlier ones catch up (and line 97: Post-Norm usually needs warmup and a small enough LR "
        "to converge)",
        measure="Post-LN, Adam, on the dev split (seed 0): at 18 layers, else (no cell trains there) 12, else 9, "
        "the LR x warmup cell of lowest dev loss among those that train (dev loss more than 0.5 nats below the "
        "unigram loss; LRs 1e-4, 3e-4, 1e-3 x warmup 100, 500 steps; none at any depth: not measured); at it, the "
        "final validation loss without warmup minus with, paired by seed, and the loss without warmup against the "
        "validation split's unigram loss - 0.5",
        criteria=(ablation.Criterion("greater"), ablation.Criterion("greater", "the unigram loss - 0.5")),
        why="warmup is what lets it train: the run without it ends worse (refuted by a gap below 0: dropping warmup "
        "helps) and fails (a diverged run counts as ln V; refuted by a loss without warmup surely more than 0.5 "
        "nats below the unigram loss: it trains without warmup too)",
        n=POWER["warmup"].n(),
        power=POWER["warmup"],
        history=(
            ablation.Revision(
                "2026-12-05",
                "registered before its FULL run, in place of 'Post-LN without warmup trains worse, more so with "
                "depth; warmup rescues it' at two fixed LRs",
                "at those LRs every 18-layer Post-LN run failed with and without warmup (issue 39): the LR and "
                "warmup where it trains are found first; seeds 0-2 were seen, so the claim is judged on 3-8",
                fresh=True,
                seeds=(3, 4, 5, 6, 7, 8),
            ),
            ablation.Revision(
                "2026-12-05",
                "the scan goes on at 12, then 9 layers where no cell trains at 18 (Adam vs SGD follows its depth)",
                "its first cell at 18 layers (lr 1e-4, warmup 100) sat at the unigram loss on the dev split, like "
                "every earlier 18-layer Post-LN run; dev data only, no scored run seen",
            ),
            ablation.Revision(
                "2026-12-06",
                "n stays 6 (seeds 3-8) at alpha 0.05, as registered before its first run; labelled underpowered (at "
                "the verdict's alpha 0.025 six seeds have power 0.77, seven needed)",
                "a resize to 7 (committed 2026-12-06 00:30) came after sitting 1 had trained this claim's warmup arm "
                "on seeds 3-5 (2.377, 2.263, 2.286; no run without warmup, so no part of the verdict was seen), so it "
                "was withdrawn (second review): n changed after runs it judges existed. Seed 9's two runs, trained in "
                "sitting 2 under the resize, are kept and not judged",
            ),
        ),
    ),
    claim(
        "Pre-LN trains without warmup",
        lines=(79, 81),
        says="Pre-Norm is usually the easier to train; Post-Norm is harder and needs extras such as LR warmup",
        measure="loss without warmup minus with, at 6 and 18 layers, per fixed LR",
        criteria=(ablation.Criterion("not greater", margin=0.05),),
        why="no worse by more than 0.05 nats, set before the run as negligible; not sized from a pilot",
    ),
    claim(
        "Post-LN ends lower than Pre-LN at 6 layers, each at its best LR and warmup",
        lines=(79, 81),
        says="Pre-Norm is usually the easier to train but ends worse than Post-Norm; this compares Post-Norm at its "
        "best settings with Pre-Norm at its own, not both at the same ones",
        measure="6 layers, Adam: final validation loss Post-LN minus Pre-LN, paired by seed; each arm's LR (3-point "
        "log grid around its 1,000-step pick, grown at its edge) and warmup (100 or 500 steps) picked on the dev "
        "split (seed 0), both trained for the first of 1,000-5,000 steps (every 1,000) at which Pre-LN's dev loss, "
        "at its 1,000-step pick in one 5,000-step dev run validated every 200 steps, gains less than 0.02 nats "
        "over the last fifth of those steps",
        criteria=(ablation.Criterion("less"),),
        why="a direction, refuted by an interval above 0 (Pre-LN ends lower at both arms' best settings); n sized "
        "for 0.02 nats, the smallest gap we would call a win",
        n=POWER["versus"].n(),
        power=POWER["versus"],
        history=(
            ablation.Revision(
                "2026-12-05",
                "registered before its FULL run, in place of the 1,000-step comparison with a shared warmup",
                "at 1,000 steps with one warmup neither arm is at its best setting (issue 39); seeds 0-2 were seen, "
                "so the claim is judged on 3-7",
                fresh=True,
                seeds=(3, 4, 5, 6, 7),
            ),
            resized("versus", 5, "no run of it on the fresh seeds yet"),
        ),
    ),
    claim(
        "Adam is less hurt than SGD by deep Post-LN's vanishing identity path",
        lines=(113, 135),
        says="Adam's update is of order the LR whenever the gradient beats the noise, SGD's is proportional to the "
        "gradient, so vanishing gradients stall SGD more",
        measure="at the depth of the warmup scan's pick (18 layers, else 12 or 9: deep enough that Post-LN's "
        "identity path is 2^-3 or less at the input, `init` below; 18 if the scan picks nothing) and with its warmup: "
        "(loss SGD - loss Adam) for Post-LN minus the same for Pre-LN, paired by seed; each of the four arms at "
        "its LR picked on the dev split by the mean over 3 dev seeds (0-2)",
        criteria=(ablation.Criterion("greater"),),
        why="a direction: SGD costs Post-LN more than Pre-LN (refuted by an interval below 0); n sized for 0.15 nats",
        n=POWER["optimizers"].n(),
        power=POWER["optimizers"],
        history=(
            ablation.Revision(
                "2026-12-05",
                "registered before its FULL run, in place of the 6-layer comparison ('Adam is less hurt than SGD by "
                "Post-LN')",
                "at 6 layers no gradient vanishes and SGD's LR came from one dev seed (issue 39); seeds 0-2 were "
                "seen, so the claim is judged on 3-6",
                fresh=True,
                seeds=(3, 4, 5, 6),
            ),
            ablation.Revision(
                "2026-12-05",
                "at the depth of the warmup scan's pick, not always 18 layers",
                "the warmup scan may go on at 12 or 9 layers (see the warmup claim); no run of this claim seen",
            ),
            resized("optimizers", 4, "no run of it on the fresh seeds yet"),
        ),
    ),
    claim(
        "DeepNorm rescues deep Post-LN (same warmup)",
        lines=(147, 151),
        says="DeepNorm multiplies the stream by alpha > 1 inside the norm, Norm(alpha x + F(x)), to keep the "
        "identity path's coefficient large",
        measure="18 layers, both with warmup: loss DeepNorm minus Post-LN; DeepNorm's loss against a failure line",
        criteria=(ablation.Criterion("less"), ablation.Criterion("less", "the unigram loss - 0.5")),
        why="lower than Post-LN, and more than 0.5 nats below the unigram loss (a model that uses no context)",
        power=POWER["rescue"],
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-04",
                "Post-LN fails when it ends within 0.5 nats of the unigram loss, not of ln V",
                "every deep Post-LN run sat at the unigram loss, 1.1 nats below ln V, and had counted as training "
                "(commit 9d02348)",
                seen="2026-12-04",
            ),
            SIZED,
            ablation.Revision(
                "2026-12-06",
                "judged on fresh seeds 10-12 (n 3; its Power, from seeds 0-2, asks 3), the criterion above unchanged",
                "the criterion was changed after seeds 0-2 were seen, so their verdict decides nothing (issue 39): the "
                "same arms rerun on seeds no run has used",
                fresh=True,
                seeds=(10, 11, 12),
            ),
        ),
    ),
    claim(
        "Pre-LN's relative residual change falls with depth (trained)",
        lines=(85, 93),
        says="in Pre-Norm x_t sums t sublayer outputs of like size, so x_t = O(t) and x_(t+1) differs from x_t "
        "relatively less as t grows: more layers make the model wider rather than deeper",
        measure="log-log slope of ||x_(l+1) - x_l|| / ||x_l|| against l, 18 layers, trained, per seed",
        criteria=(ablation.Criterion("less"),),
        why="a direction (the notes' O(t) gives -1)",
        power=POWER["change"],
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-02",
                "a negative log-log slope against l, not the last layer's change over the first's below 0.5",
                "changed after the first rounds' runs were seen (commit 5e96f26; issue 39's audit)",
                seen="2026-12-02",
            ),
            SIZED,
            ablation.Revision(
                "2026-12-06",
                "judged on fresh seeds 10-12 (n 3; its Power, from seeds 0-2, asks 2; 3 kept), the criterion above "
                "unchanged",
                "the criterion was changed after seeds 0-2 were seen, so their verdict decides nothing (issue 39): the "
                "same arms rerun on seeds no run has used",
                fresh=True,
                seeds=(10, 11, 12),
            ),
        ),
    ),
)
FRESH = {k: ablation.seeds(max(3, p.n()), first=FIRST.get(k, 3)) for k, p in POWER.items()}  # 0-2 were seen
print({k: f"n = {p.n()}, power {p.achieved(p.n()):.2f} at one-sided alpha {p.alpha:g}" for k, p in POWER.items()})

# %%
nt, ns = ablation.norm_trained, ablation.norm_sections  # the arms; the sections' loops
base = nt.base_config(NOTEBOOK, STEPS)
ceiling = math.log(base.model.dims.vocab_size)
floor = nt.unigram_floor(base, NOTEBOOK)  # character frequencies alone: no context used
print(f"ln V = {ceiling:.3f}; unigram loss: dev {floor['dev']:.3f}, validation {floor['val']:.3f}")
arms = nt.Arms(base, NOTEBOOK, WARMUP)

# %% [markdown]
# ## Warmup at fixed learning rates (Adam)
# Post-LN and Pre-LN at the shallow and the deep depth, with and without warmup, at each fixed LR.
# A run that diverges counts as the uniform predictor (ln V nats), so that it can be paired. The
# deep runs at the first LR also record the relative residual change of their trained checkpoint;
# Pre-LN's there trains again on the relative-change claim's fresh seeds, which judge it.

# %%
warm = nt.fixed_lr_arms(arms, ("post", "pre"), (SHALLOW, DEEP), WARMUP_LRS, SEEDS)
warm_loss = {key: ns.finals(runs, ceiling) for key, runs in warm.items()}
for key, runs in warm.items():
    diverged = sum(c.diverged for c in runs)
    print(key, ablation.mean_text(warm_loss[key], 4), f"{diverged} diverged" if diverged else "")
rel_change = ns.relative_changes(warm, DEEP, WARMUP_LRS[0], SEEDS)  # by seed; a diverged run has no checkpoint
pre_fresh = arms.train("pre", DEEP, FRESH["change"], lr=WARMUP_LRS[0], measure=nt.relative_change)
rel_change_fresh = ns.relative_changes(
    {("pre", DEEP, True, WARMUP_LRS[0]): pre_fresh}, DEEP, WARMUP_LRS[0], FRESH["change"], ("pre",)
)

# %% [markdown]
# ## Where warmup lets deep Post-LN train, and the same LR without it
# At the fixed LRs above no 18-layer Post-LN run trains, with or without warmup: there is nothing
# for warmup to rescue. The notes ask for warmup *and* a small enough LR (line 97), so Post-LN is
# scanned on the dev split (seed 0) over smaller LRs and a longer warmup, at 18 layers and, where no
# cell trains there, at 12, then 9. At the deepest depth with a training cell (dev loss more than
# 0.5 nats below the unigram loss), at its cell of lowest dev loss, the fresh seeds train with that
# warmup and without any. Where no cell trains at any depth, the claim is not measured.

# %%
scans = nt.deepest_training_scan(arms, SCAN_DEPTHS, SCAN_LRS, SCAN_WARMUPS, floor=floor["dev"], margin=FAIL_MARGIN)
print(ns.scan_lines(scans))
point = scans["pick"] or ablation.pick(smoke=scans["scans"][DEEP]["cells"][0], full=None)  # SMOKE: runs it all
warm_depth = scans["depth"] or DEEP
lets = ns.with_and_without_warmup(arms, warm_depth, point, FRESH["warmup"], ceiling)
for key in lets if point else ():
    print(f"post L{warm_depth} lr {point['lr']:g}, {key}:", ablation.mean_text(lets[key], 4))

# %% [markdown]
# ## Post vs Pre at 6 layers, each at its best LR and warmup, to a dev plateau
# The length: Pre-LN at its 1,000-step dev pick, one 5,000-step dev run; the first of 1,000-5,000
# steps whose last fifth gains less than 0.02 nats. At that length each placement's LR (a 3-point
# grid around its 1,000-step pick, grown at the edge) and warmup (100 or 500) come from the dev
# split; then the fresh seeds train.

# %%
to_plateau, versus = ns.post_vs_pre(
    arms, SHALLOW, ADAM_GRID, SCAN_WARMUPS, PLATEAU_STEPS, PLATEAU_EVERY, FRESH["versus"], ceiling
)
long_steps, best = to_plateau["steps"], to_plateau["best"]
for p, b in best.items():
    print(
        f"{p} L{SHALLOW}, {long_steps} steps, lr {b['lr']:.3g}, warmup {b['warmup']}:", ablation.mean_text(versus[p], 4)
    )

# %% [markdown]
# ## Adam vs SGD at depth, where Post-LN's identity path vanishes
# At the depth of the Post-LN scan's pick (18, else 12 or 9) and that pick's warmup, each placement
# with each optimizer at its LR picked on the dev split by the mean over 3 dev seeds (Adam around
# the scan's LR, SGD around 0.1); then the fresh seeds.

# %%
deep_warmup = point["warmup"] if point else WARMUP
centers = {"adam": point["lr"] if point else 1e-3, "sgd": 0.1}
optimizers = ns.adam_vs_sgd(arms, warm_depth, centers, deep_warmup, DEV_SEEDS, FRESH["optimizers"], ceiling)
for (p, o), t in optimizers.items():
    print(f"{p} L{warm_depth} {o} lr {t['lr']:.3g}:", ablation.mean_text(t["final"], 4))

# %% [markdown]
# ## DeepNorm against Post-LN where Post-LN fails, with the same warmup
# Post-LN at the deep depth with warmup, on the dev split at each LR of a fixed grid (one seed; no
# grid extension, since the scan looks for a failure, not for the best LR); the comparison runs at
# the smallest LR where it fails (diverges or ends within 0.5 nats of the dev split's unigram loss).
# Where it fails nowhere there is nothing to rescue, and the seeded runs (the claim's fresh seeds)
# are not trained.

# %%
rescue, rescue_runs = ns.deepnorm_rescue(
    arms, DEEP, RESCUE_GRID, floor=floor["dev"], margin=FAIL_MARGIN, seeds=FRESH["rescue"], ceiling=ceiling
)
print({k: v for k, v in rescue.items() if k != "sweep"})
fig_train = nt.training_figure(warm, rescue_runs.get("deepnorm", []), rel_change, floor["val"], DEEP, WARMUP_LRS[0])
plt.show()

# %% [markdown]
# ## Verdict
# Each row judged by its registered criterion (`CLAIMS` above), differences paired by seed or by
# initialisation. Two criteria were changed after seeds 0-2 had been seen (the failure line: the
# unigram loss, not ln V; the relative change: a slope, not the last layer's change over the
# first's), so those rows are judged on fresh seeds 10-12, registered before they ran.

# %%
ns = ablation.norm_sections  # one function per claim: its measured text and comparisons, judged by CLAIMS
claims = {
    "Warmup is what lets deep Post-LN train": ns.warmup_lets_train(lets, point, warm_depth, floor["val"], FAIL_MARGIN),
    "Pre-LN trains without warmup": ns.pre_without_warmup(warm_loss, WARMUP_LRS, (SHALLOW, DEEP), margin=0.05),
    "Post-LN ends lower than Pre-LN at 6 layers, each at its best LR and warmup": ns.post_below_pre(
        versus, best, SHALLOW, long_steps
    ),
    "Adam is less hurt than SGD by deep Post-LN's vanishing identity path": ns.sgd_costs_post_more(
        optimizers, warm_depth, deep_warmup
    ),
    "DeepNorm rescues deep Post-LN (same warmup)": ns.deepnorm_rescues(
        rescue, DEEP, floor["val"], FAIL_MARGIN, FRESH["rescue"]
    ),
    "Pre-LN's relative residual change falls with depth (trained)": ns.change_falls(rel_change_fresh["pre"], DEEP),
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        **ns.record(
            warm_loss,
            {**rel_change, "pre fresh": rel_change_fresh["pre"]},
            scans,
            lets,
            to_plateau,
            best,
            versus,
            optimizers,
            rescue,
            floor,
            SEEDS,
            FRESH,
        ),
        "verdicts": table,
    },
    figures={"training": fig_train},
    configs={"base": base},
    seeds=sorted({*SEEDS, *(s for f in FRESH.values() for s in f)}),
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## Reading the FULL run
# Issue 39's redo, registered 2026-12-05/06 and trained over seven sittings, each from a commit
# holding the registered claims (`registered.json`; notebooks/README.md); 187 runs, 12.9 h summed.
# What would have refuted each verdict is in the gallery's "refuted by" column.
# - **Warmup is what lets deep Post-LN train: holds** (underpowered: 6 seeds of the 7 sized), at 12
#   layers: no LR x warmup cell trains at 18 (dev losses 3.30-3.34, the unigram loss). At the 12-layer
#   pick (lr 1e-3, warmup 500) dropping warmup costs +1.040 [+0.985, +1.095] nats, and every run
#   without it sits at the unigram loss (3.323).
# - **Post-LN ends lower than Pre-LN at 6 layers, each at its best: does not hold**; Pre-LN ends lower
#   (each tuned on the dev split at 5,000 steps: Post-LN 1.615 at lr 3e-3, Pre-LN 1.582 at 9e-3; Post -
#   Pre +0.033 [+0.017, +0.049], n=7). At this size and length the notes' "Post-Norm ends better" is
#   not seen.
# - **Adam is less hurt than SGD by deep Post-LN: inconclusive** (12 layers, warmup 500, each arm at its
#   LR over 3 dev seeds): SGD costs Post-LN 0.36 and Pre-LN 0.18 nats, +0.186 [-0.225, +0.598] (n=5),
#   the notes' way, but one Post-LN SGD seed sits at the unigram loss.
# - **Pre-LN trains without warmup: inconclusive** (3 seeds): within 0.05 nats at three of four cells;
#   at 18 layers lr 3e-3 the cost reaches +0.074 at the 90% bound.
# - **DeepNorm rescues deep Post-LN: holds**, on fresh seeds 10-12 (its failure line was changed after
#   seeds 0-2 were seen): at 18 layers, lr 1e-3, both with warmup, Post-LN sits at the unigram loss
#   (3.325) and DeepNorm reaches 2.269, -1.056 [-1.071, -1.040] against it and 0.55 nats below the line.
# - **Pre-LN's relative change falls with depth: holds**, on fresh seeds 10-12 (its slope criterion
#   came after seeds 0-2): log-log slope -0.565 [-0.568, -0.561], shallower than the notes' O(t) (-1).
