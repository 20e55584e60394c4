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
# # Positional encodings: none, sinusoidal, learned, relative bias, RoPE, ALiBi
#
# **What the notes claim** (`004_0c7acc088a14ef8a.txt`):
# 1. Lines 45-46: neither attention nor the FFN takes a word's position into account, so a model
#    without position information cannot tell "屡败屡战" (defeated again and again, fighting on) from
#    "屡战屡败" (fighting again and again, defeated again and again); hence position encodings, of
#    three kinds: absolute, relative and rotary.
# 2. Line 50: a fixed (sinusoidal) absolute encoding generalises poorly to long sequences, and a
#    learned one cannot be used on sequences longer than its table; line 54: a relative encoding
#    encodes the distance i - j.
#
# **What is measured.** Claim 1 on a task where order is everything, reversing random symbols,
# against the loss of the order-blind predictor, computed, not fitted (section 1); two identities,
# checked, not judged (section 2); claim 2 on one character-level Shakespeare model trained at
# context 64 with each encoding, evaluated at 64, 128 and 256 (section 3). Every training arm runs 3
# seeds (initialisation and data order; arms paired by seed) with its learning rate tuned on a dev
# split; each verdict comes from a 95% interval over seeds (90% for "no worse", against a margin
# registered before the run). `TRANSFORMER_JAX_SMOKE=1`: tiny sizes, 2 seeds, and verdicts that
# decide nothing.

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
import dataclasses

import jax
import matplotlib.pyplot as plt
import numpy as np

from transformer_jax import ablation
from transformer_jax.models import EmbeddingsConfig, InitConfig, SoftmaxAttention, with_changes

NOTEBOOK = "positional_encoding"
STEPS = ablation.pick(smoke=20, full=2000)
SEEDS = ablation.seeds()
TRAIN_LEN, EVAL_LENS = 64, ablation.pick(smoke=(64, 256), full=(64, 128, 256))
ENCODINGS = ("none", "sinusoidal", "sinusoidal_scaled", "learned", "relative_bias", "rope", "alibi")
# sinusoidal_scaled: token embeddings of unit variance (init std d^-1/2, times sqrt(d)), as in Vaswani et al.
ARM_MODEL = {"sinusoidal_scaled": {"position": "sinusoidal", "embeddings": EmbeddingsConfig(scale=True)}}
REORDER = {"reverse, none": ("reverse", "none"), "sort, none": ("sort", "none")}
REORDER |= {f"reverse, {p}": ("reverse", p) for p in ("sinusoidal", "rope")}
REORDER_STEPS, GRID_REORDER = ablation.pick(smoke=(20, [1e-3, 3e-3]), full=(800, ablation.lr_grid(3e-3)))
print("mode:", "SMOKE" if ablation.smoke() else "FULL", "| seeds:", SEEDS, "| devices:", jax.devices())
print(ablation.committed_note(NOTEBOOK))

# %% [markdown]
# ## Claims, registered
# What each verdict row tests, in one place: the notes' claim (in our words, with its file), the
# measure, the criterion and why, the level, n (and its power calculation). `ablation.save_results`
# refuses comparisons judged otherwise and stores these specs in results.json, where a test holds
# them: a changed criterion means a rerun, and one changed after the numbers were seen keeps its
# `history` (its row stays exploratory until rerun on new data). A `check` is an identity: shown,
# never a verdict.
#
# A correction read after the run (the registered spec, which the committed results ran under, is kept):
# claim 1's pilot sd reads 0.0017, but its pilot values (1.295, 1.291, 1.292) give 0.0021, at which
# `ablation.Power` still asks n=2, so 3 run (the protocol's minimum). The FULL run's fresh seeds spread
# more (sd 0.021: the same calculation asks n=4), yet their 90% interval [1.19, 1.26] is far above 0.95.

# %%
REGISTERED = ablation.REGISTERED_AFTER_FULL_RUN
BEFORE = ablation.Revision("2026-12-05", "registered", "before the FULL run that judges it (issue 39, item 3)")
claim = lambda name, **kw: ablation.Claim(
    name, **{"notes": "004_0c7acc088a14ef8a.txt", "n": 3, "history": (REGISTERED,), **kw}
)
FRESH_FIRST = 3  # the reordering rows' FULL run of 2026-12-05 used seeds 0-2
LENGTH_POWER = ablation.Power(  # the length claim's fresh rerun (seeds 10 on: 3-5 hold other arms' runs)
    0.109,
    0.3,
    "the committed length runs of seeds 0-2 (2026-12-03): sd of worst relative - best absolute growth; 0.3 nats: "
    "a quarter of the best absolute encoding's growth there (1.23), the least improvement worth the name",
)
CLAIMS = ablation.register(
    claim(
        "Without positions the model cannot tell a sequence from its reordering",
        lines=(45, 46),
        says="attention and the FFN ignore where a word stands, so without a position encoding the model "
        "cannot distinguish 屡败屡战 from 屡战屡败 (the same characters reordered) and gives absurd results",
        measure="validation loss over the order-blind loss of the same examples, per seed, on fresh seeds "
        f"{FRESH_FIRST}-{FRESH_FIRST + 2}: reversing (order is the task) without positions, against 1 and, "
        "paired by seed, against the source-bag loss on the same scale; then sorting (the control: the target "
        "is a function of the symbols' counts) without positions",
        criteria=(
            ablation.Criterion("not less", 1.0, margin=0.05),
            ablation.Criterion("less", "the source-bag loss of the same examples, about 1.5"),
            ablation.Criterion("less", 0.5),
        ),
        why="the order-blind loss (1 on this scale) is the least a model blind to order can reach, exactly, "
        "on every ordering; a worse order-blind model beats its own expectation on 500 validation "
        "sequences by luck alone with an sd of 0.0004 (simulated), so 0.05 is a leak of order, not noise. "
        "The source-bag loss bounds it from above: the loss of a model that knows which symbols the source "
        "holds and how often, but neither their order nor which of them it has already emitted "
        "(sum_k c_k log(L / c_k) nats per sequence, EOS free; 1.52-1.53 on this scale for these splits, "
        "computed, not fitted). An order-blind model that learned the content ends between the two; one above "
        "the bag did not learn even that (a diverged run, scored as uniform over the 32 symbols, sits near 3), "
        "and its 'chance' would show a model that did not train. Refuted if the reversal without positions "
        "ends more than 5% below 1 (order leaked through padding, EOS, masks or the decoder), if it does not "
        "end below the source-bag loss, or if sorting without positions stays above half of 1 (the model did "
        "not train, and reversal at chance shows nothing). The upper part asks for n=2 (seeds 0-2: reversal "
        "minus bag -0.287, -0.288, -0.315)",
        power=ablation.Power(
            sd=0.0017,
            effect=0.05,
            pilot="pilot, 2026-12-05: reversal without positions, 3 seeds (1.295, 1.291, "
            "1.292; lr 1e-3, 1,200 steps); it asks for n=2, and the protocol's minimum of 3 is run",
            equivalence=True,
        ),
        history=(
            BEFORE,
            ablation.Revision(
                "2026-12-05",
                "part 1 two-sided: the reversal without positions must also end below the source-bag loss",
                "one-sided, a diverged or untrained position-free reversal passed it (scored log 32, it is far above "
                "1), so the part was close to an identity (issue 39)",
                seen="2026-12-05",
            ),
            ablation.Revision(
                "2026-12-05",
                f"judged on fresh seeds {FRESH_FIRST}-{FRESH_FIRST + 2}: the reversal and the sort without positions, "
                "each at the learning rate its committed dev sweep picked (no sweep rerun)",
                "seeds 0-2 were seen; the same seeds would reproduce the same numbers",
                fresh=True,
                seeds=tuple(range(FRESH_FIRST, FRESH_FIRST + 3)),
            ),
        ),
    ),
    claim(
        "With positions (sinusoidal, RoPE) the model reverses the sequence",
        lines=(45, 46),
        says="hence position encodings are added: absolute, relative or rotary",
        measure="validation loss over the order-blind loss of the same examples, per seed, on reversing: "
        "sinusoidal (absolute, in both stacks); RoPE (rotary, in both stacks' self-attention)",
        criteria=(ablation.Criterion("less", 0.5),),
        why="half the order-blind loss, fixed before the run, far from both 1 (order-blind) and the 0.002 or "
        "less that 1,500-step pilots of either reached: refuted if either one's 95% interval does not end below 0.5",
        history=(BEFORE,),
    ),
    claim(
        "Without positions, self-attention is permutation-equivariant",
        says="neither attention nor the FFN sees word order, so a phrase and its reordering look the same",
        measure="max |f(Px) - Pf(x)| / max |f(x)| without positions; the smaller of learned and RoPE with them",
        criteria=(ablation.Criterion("less", 1e-4), ablation.Criterion("greater", 1e-2)),
        why="an algebraic identity of attention without positions: only float32 rounding can break it",
        check=True,
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-01",
                "a bound of 1e-4 on the difference relative to max |f(x)|, not an absolute 1e-4",
                "the first FULL run's absolute bound failed on float32 rounding: 1.6e-4 on logits of 21 (09b0488)",
                seen="2026-12-01",
            ),
        ),
    ),
    claim(
        "RoPE's dot product depends only on the relative offset",
        notes="002_aa3d7b0c5341285e.txt",
        says="RoPE rotates pairs of dimensions by an angle proportional to the position",
        measure="largest spread along a diagonal of the score matrix, over the score's std",
        criteria=(ablation.Criterion("less", 1e-3),),
        why="an identity of rotations, R(m)^T R(n) = R(n - m): only float32 rounding can break it",
        check=True,
    ),
    claim(
        "Relative encodings degrade less than absolute ones at 4x the training length",
        notes="002_aa3d7b0c5341285e.txt",
        lines=(103, 105),
        says="a fixed sinusoidal absolute encoding does not suit long sequences, while RoPE, which encodes the "
        "relative position, is especially useful for them and improves long-sequence modelling",
        measure="loss at 256 minus loss at 64 (trained at 64), worst relative minus best absolute, paired by seed",
        criteria=(ablation.Criterion("less"),),
        why="a direction",
        n=LENGTH_POWER.n(),
        power=LENGTH_POWER,
        history=(
            REGISTERED,
            ablation.Revision(
                "2026-12-03",
                "the absolute arms include sinusoidal_scaled (unit-variance token embeddings, as in Vaswani et al.) "
                "beside sinusoidal and learned",
                "the preset's std-0.02 embeddings are outweighed ~35:1 by the sinusoid, so 'absolute' had to include "
                "the paper's setting (f7252da); made after the seeds 0-2 runs of sinusoidal, learned and the "
                "relative bias were scored (found on review 2026-12-06); it can only make the claim harder",
                seen="2026-12-03",
            ),
            ablation.Revision(
                "2026-12-06",
                "a power calculation sizes n (LENGTH_POWER: sd from seeds 0-2)",
                "issue 39 asks for n sized from a pilot's variance; seeds 0-2 serve as the pilot of the fresh rerun, "
                "registered before it ran",
            ),
            ablation.Revision(
                "2026-12-06",
                "judged on fresh seeds 10-13 (n 4, from LENGTH_POWER), each arm at its committed dev-split LR, the "
                "criterion above unchanged",
                "the absolute set changed after seeds 0-2 were scored, so their verdict decides nothing: the relative "
                "and absolute arms rerun on seeds no run has used",
                fresh=True,
                seeds=(10, 11, 12, 13),
            ),
        ),
    ),
    claim(
        "A learned table cannot extrapolate",
        lines=(50, 50),
        says="a learnable absolute encoding cannot be applied to longer sequences",
        measure="learned table: loss at 256 minus loss at 64",
        criteria=(ablation.Criterion("greater", 0.5),),
        why="0.5 nats: positions past the table are untrained, a clear degradation far above seed noise",
    ),
)

# %% [markdown]
# ## 1. Telling a sequence from its reordering
# The `original_tiny` encoder-decoder (2 + 2 layers, d_model 64) maps 4 to 12 random symbols (of 32)
# to their reverse, or to them sorted (the control that the position-free model learns at all: the
# target depends on the symbols, not their order), with the position encoding in both stacks (the
# encoder attends both ways; cross-attention carries no position). Without positions the encoder's
# outputs are a set, so the best it can do is the order-blind predictor (`ablation.orders`): log(L!
# / prod_k c_k!) nats per sequence (c_k: how often symbol k occurs), spread over its L + 1 target
# tokens (the symbols and EOS). Scored: the validation loss of 500 sequences over theirs; 1 is
# chance, 0 a perfect reversal. Learning rates: the best of 1, 3 and 9 x 1e-3 (grown once past an
# edge that wins) on a dev seed's sequences (`ablation.DEV_SEED`).

# %%
FRESH = ablation.seeds(first=FRESH_FIRST)  # claim 1's seeds (its upper bound came after seeds 0-2 were seen)
reorder = ablation.orders.run_reordering(
    REORDER, NOTEBOOK, SEEDS, FRESH, ("reverse, none", "sort, none"), steps=REORDER_STEPS, grid=GRID_REORDER
)
chance, order_ratio, order_records, order_sweeps = reorder.chance, reorder.ratio, reorder.records, reorder.sweeps
fresh_chance, fresh_ratio, bag_ratio = reorder.fresh_chance, reorder.fresh_ratio, reorder.bag_ratio
curves = dict(reorder.curves)  # every run's curves, for results.json: the encodings' runs join them below
print(ablation.orders.summary(reorder, FRESH))
fig_order = ablation.orders.figure(reorder, REORDER, SEEDS[0])
plt.show()

# %% [markdown]
# ## 2. Two identities: permutation equivariance without positions, RoPE's offset
# A randomly initialised model with `position="none"` and no causal mask: outputs for a permuted
# input against the permuted outputs, as a difference relative to the largest output (float32
# rounding through the layers leaves about 1e-5; a position encoding changes outputs by O(1)). With
# a position encoding the same test fails. One initialisation, input and permutation per seed. (The
# first FULL run used an absolute bound of 1e-4 on logits as large as 21 with `init.std=0.5` and read
# 1.6e-4: "does not hold".) RoPE: random q and k (one pair per seed) at positions m and n, q_m . k_n
# for all pairs, constant along every diagonal (fixed m - n).

# %%
base = ablation.shakespeare_config(NOTEBOOK, steps=STEPS)
base = dataclasses.replace(base, model=with_changes(base.model, max_len=max(EVAL_LENS)))
cfg = dataclasses.replace(base.model, attention=SoftmaxAttention(causal=False), init=InitConfig(std=0.5))
gap = lambda p, s: ablation.positions.seeded_permutation_gap(dataclasses.replace(cfg, position=p), s, TRAIN_LEN)
equivariance = {p: [gap(p, s) for s in SEEDS] for p in ("none", "learned", "rope")}
print("max |f(P x) - P f(x)| / max |f(x)| by encoding and seed:", equivariance)
D, P = 64, 128
all_scores = [ablation.positions.rope_scores(*jax.random.normal(jax.random.key(1000 + s), (2, D)), P) for s in SEEDS]
rope_spread = [ablation.positions.diagonal_spread(s) for s in all_scores]
fig_rope = ablation.positions.rope_figure(all_scores[0])
plt.show()
print("largest spread of the score along a diagonal, over the score's std, by seed:", rope_spread)

# %% [markdown]
# ## 3. Training at context 64, evaluating at 64, 128 and 256
# The learned table has `max_len` = 256 rows so that longer evaluation is possible at all. The
# sinusoid runs beside this preset's small (std 0.02) token embeddings, which it outweighs about
# 35:1, and as in Vaswani et al. (`sinusoidal_scaled`: embeddings of unit variance); both count as
# absolute. ALiBi (Press et al. 2022) is not in the notes: its numbers are shown, it counts among
# the relative encodings, and it makes no verdict of its own. Learning rates: the best of 1/3, 1 and
# 3 x 1e-3 (grown by 3x past an edge that wins, up to twice) on a dev split carved from the end of
# the training text (one seed); validation is scored. The relative and absolute arms run again on
# fresh seeds 10-13, which judge the relative-vs-absolute row (its absolute set grew after seeds 0-2
# were scored).

# %%
GRID = ablation.pick(smoke=[1e-3, 3e-3], full=ablation.lr_grid(1e-3))
length_cfg = lambda p: dataclasses.replace(base.model, **ARM_MODEL.get(p, {"position": p}))
arms = {p: dataclasses.replace(base, model=length_cfg(p)) for p in ENCODINGS}
lengths = ablation.lengths.run_length_arms(arms, GRID, NOTEBOOK, SEEDS, EVAL_LENS)
relative, absolute = ("relative_bias", "rope", "alibi"), ("sinusoidal", "sinusoidal_scaled", "learned")
FRESH_LEN = ablation.seeds(LENGTH_POWER.n(), first=10)  # the relative-vs-absolute claim's fresh seeds
fresh_len = ablation.lengths.run_length_arms(
    {p: arms[p] for p in relative + absolute}, GRID, NOTEBOOK, FRESH_LEN, EVAL_LENS
).eval_loss
configs, eval_loss, sweeps = dict(reorder.configs) | lengths.configs, lengths.eval_loss, lengths.sweeps
curves |= lengths.curves
for p in ENCODINGS:
    edge = " (at the edge of the grid)" if sweeps[p]["at_edge"] else ""
    print(f"{p}: lr {sweeps[p]['lr']:.3g}{edge}; dev loss by lr", sweeps[p]["dev_loss"])
    print(p, {n: ablation.mean_text(v) for n, v in eval_loss[p].items()})
fig_len = ablation.positions.length_figure(lengths.curves, eval_loss, EVAL_LENS, TRAIN_LEN, SEEDS[0])
plt.show()

# %% [markdown]
# ## Verdict
# The criteria are the registered ones (above, each with its history: the first row judged on fresh
# seeds 3-5, the relative-vs-absolute row on 10-13). Equivariance and RoPE's offset are identities:
# checks, not verdicts.

# %%
grown = lambda losses, arms: {p: np.subtract(losses[p][EVAL_LENS[-1]], losses[p][TRAIN_LEN]) for p in arms}
growth, fresh_growth = grown(eval_loss, ENCODINGS), grown(fresh_len, relative + absolute)
ratio_text = lambda arms: "; ".join(f"{a} {ablation.mean_text(order_ratio[a], 3)}" for a in arms)
worst = np.max([fresh_growth[p] for p in relative], axis=0)
best = np.min([fresh_growth[p] for p in absolute], axis=0)
positioned = np.minimum(equivariance["learned"], equivariance["rope"])  # the smaller gap with positions
claims = {
    "Without positions the model cannot tell a sequence from its reordering": (
        f"fresh seeds {FRESH[0]}-{FRESH[-1]}, loss / order-blind loss: reverse, none "
        f"{ablation.mean_text(fresh_ratio['reverse, none'], 3)}, source bag {ablation.mean_text(bag_ratio, 3)}, "
        f"sort, none {ablation.mean_text(fresh_ratio['sort, none'], 3)}; parts: reverse vs 1, reverse - bag, "
        "sort vs 0.5",
        [
            ablation.paired(fresh_ratio["reverse, none"], expect="not less", reference=1.0, margin=0.05),
            ablation.paired(fresh_ratio["reverse, none"], bag_ratio, expect="less"),
            ablation.paired(fresh_ratio["sort, none"], expect="less", reference=0.5),
        ],
    ),
    "With positions (sinusoidal, RoPE) the model reverses the sequence": (
        "loss / order-blind loss, " + ratio_text(["reverse, sinusoidal", "reverse, rope"]),
        [ablation.paired(order_ratio[f"reverse, {p}"], expect="less", reference=0.5) for p in ("sinusoidal", "rope")],
    ),
    "Without positions, self-attention is permutation-equivariant": (
        "relative difference between f(Px) and Pf(x), none; then the smaller of learned and rope",
        [
            ablation.paired(equivariance["none"], expect="less", reference=1e-4),
            ablation.paired(positioned, expect="greater", reference=1e-2),
        ],
    ),
    "RoPE's dot product depends only on the relative offset": (
        "largest spread along a diagonal over the score's std",
        [ablation.paired(rope_spread, expect="less", reference=1e-3)],
    ),
    "Relative encodings degrade less than absolute ones at 4x the training length": (
        f"fresh seeds {FRESH_LEN[0]}-{FRESH_LEN[-1]}, loss at 256 minus loss at 64 (nats): "
        + "; ".join(f"{p} {ablation.mean_text(fresh_growth[p], 2)}" for p in relative + absolute)
        + "; worst relative - best absolute",
        [ablation.paired(worst, best, expect="less")],
    ),
    "A learned table cannot extrapolate": (
        "learned: loss at 256 - loss at 64",
        [ablation.paired(growth["learned"], expect="greater", reference=0.5)],
    ),
}
by_seed = lambda p, losses=eval_loss, seeds=SEEDS: {
    s: {f"val loss at {n}": losses[p][n][i] for n in EVAL_LENS} for i, s in enumerate(seeds)
}
table = ablation.verdict_table([ablation.row(claim, what, *parts) for claim, (what, parts) in claims.items()])
print(table)
out = ablation.save_results(
    NOTEBOOK,
    {
        "reorder": {
            "order_blind_loss": chance,
            "fresh": {"seeds": list(FRESH), "order_blind_loss": fresh_chance, "source_bag_ratio": bag_ratio},
            "arms": order_records,
            "lr_sweeps": order_sweeps,
        },
        "equivariance": {p: {"seeds": list(SEEDS), "values": v} for p, v in equivariance.items()},
        "rope_diag_spread_over_std": {"seeds": list(SEEDS), "values": rope_spread},
        "arms": {p: ablation.arm_record(by_seed(p)) for p in ENCODINGS},
        "fresh_length_arms": {p: ablation.arm_record(by_seed(p, fresh_len, FRESH_LEN)) for p in fresh_len},
        "curves": curves,
        "lr_sweeps": sweeps,
        "verdicts": table,
    },
    figures={"reorder": fig_order, "rope_scores": fig_rope, "length": fig_len},
    configs=configs,
    seeds=sorted({*SEEDS, *FRESH, *FRESH_LEN}),
    comparisons={claim: parts for claim, (_, parts) in claims.items()},
    claims=CLAIMS,
)
print("results in", out)

# %% [markdown]
# ## Reading the FULL run
# Reordering 2026-12-05 (its first row on fresh seeds 3-5); lengths 2026-12-03 (the relative-vs-absolute
# row on fresh seeds 10-13, 2026-12-06).
# **The notes' point (004, lines 45-46) holds here.** Reversing 4 to 12 random symbols, the model
# without positions ends at 1.227 [1.192, 1.262] (90%, fresh seeds 3-5) times the order-blind loss:
# above it, as a model that sees the source as a multiset must be, and 0.301 [0.249, 0.353] below the
# source bag (1.528), so it learned the content and only the order escaped it. It sorts the same
# sequences down to 0.019 of that loss, so it trains. With sinusoidal positions the reversal falls to
# 0.004 of it, with RoPE to 0.005. (That row's lower part alone was close to an identity, so after
# seeds 0-2 were seen it was made two-sided and judged on fresh seeds: its history above.) RoPE
# rotates only self-attention here: the model carried each symbol's distance to EOS in its content.
#
# **Length (002, lines 103-105; 004, line 50).** Both rows side with the notes. On fresh seeds 10-13
# (the absolute set grew after seeds 0-2 were scored) the worst relative encoding grows less than the
# best absolute one from 64 to 256: -0.291 [-0.366, -0.216] nats (seeds 0-2 gave -0.33 [-0.60,
# -0.06]); the learned table, whose rows past 64 were never trained, grows by 1.31 nats. Also seen:
# - ALiBi (not in the notes) is the only encoding whose loss does not grow with length (1.76 at 64,
#   1.74 at 256 on seeds 10-13), but relative bias and RoPE are better at the training length (1.68, 1.69).
# - RoPE and the relative bias still degrade (0.46 and 0.87 nats at 4x): against the notes' picture of
#   RoPE as the cure for long sequences, relative encodings are not free of a length limit (offsets
#   never trained; Press et al. report the same for RoPE).
# - Without any encoding the loss grows by only 0.40 nats (seeds 0-2), less than every absolute one,
#   from the highest start (2.03): with a causal mask the model can infer position (Haviv et al.
#   2022), and has no table to run off the end of.
# - The sinusoid's growth depends on its mix with the tokens: beside this preset's std-0.02 embeddings
#   it grows 1.72 +- 0.44 nats, beside unit-variance ones (`sinusoidal_scaled`) 1.16, like the learned
#   table; the row holds with either as the best absolute encoding.
# - Scale: reordering, 0.17M parameters, 800 steps of 32 sequences; lengths, 0.8M parameters, 2,000
#   steps of 12 x 64 characters, evaluated at 1x, 2x, 4x only.
