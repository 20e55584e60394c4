"""Verdicts on synthetic results whose answer is known.

The package's part (``transformer_jax.ablation``): ``verdict`` (True / False / None -> holds /
does not hold / inconclusive), ``verdict_table``, the docs gallery that shows FULL runs'
tables, and ``Curves.diverged`` / ``final_val`` / ``final_or`` that notebooks feed into their
comparisons. The protocol's statistics are tested in ``tests/ablation``.

The notebooks' part: each notebook decides its verdicts in one cell of top-level code (no
function to import). ``notebook_verdicts`` runs that cell, exactly as written in
``notebooks/<name>.py``, on synthetic per-seed (or per-item) inputs bound to the names the cell
reads, with the real ``ablation`` functions except a ``save_results`` that only records; it
returns ``{claim: verdict}`` and checks that every claim's comparisons were saved
(``verdict_cells.py``). This file holds the package's part and three notebooks (causal_mask,
attention_scaling, positional_encoding), ``test_verdicts_training.py`` and
``test_verdicts_decoding.py`` the other five. Each case states numbers for which the answer is
known, a variant that turns the verdict the other way, and, for most claims, one whose interval
straddles the claim's bound ("inconclusive"). Three seeds unless stated; ``jitter`` gives each arm
its own seed-to-seed noise so that paired differences have a spread.
"""

import json
import math
import pathlib

import numpy as np
import pytest

from tests.notebooks.verdict_cells import FAILS, HOLDS, SEEDS, UNSURE, arm, jitter, notebook_verdicts
from transformer_jax import ablation

# The package ----------------------------------------------------------------------------------


def test_verdict_maps_true_false_none():
    assert [ablation.verdict(x) for x in (True, False, None)] == [HOLDS, FAILS, UNSURE]
    # numpy comparisons (several notebooks pass them; the annotation says bool) are read as booleans,
    # never as "inconclusive"; a comparison with NaN is False, i.e. "does not hold"
    yes, no, nan = np.float64(1.0) < 2.0, np.float64(3.0) < 2.0, np.float64(np.nan) < 1.0
    assert [ablation.verdict(x) for x in (yes, no, nan)] == [HOLDS, FAILS, FAILS]  # pyright: ignore[reportArgumentType]


def test_verdict_table_keeps_rows_in_order_and_accepts_only_the_three_verdicts(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")  # SMOKE mode prefixes every verdict
    rows = [("c1", "m1", HOLDS), ("c2", "m2", FAILS), ("c3", "m3", UNSURE)]
    lines = ablation.verdict_table(rows).splitlines()
    assert lines[:2] == ["| claim | measured | verdict |", "| --- | --- | --- |"]
    assert lines[2:] == ["| c1 | m1 | holds |", "| c2 | m2 | does not hold |", "| c3 | m3 | inconclusive |"]
    for bad in ("Holds", "holds ", "supported", "", None, True):
        with pytest.raises(ValueError, match="use one of holds, does not hold, inconclusive"):
            ablation.verdict_table([*rows, ("c4", "m4", bad)])  # type: ignore[list-item]


def _write_record(root: pathlib.Path, notebook: str, mode: str, table: str) -> None:
    folder = root / "experiments" / "results" / notebook
    folder.mkdir(parents=True)
    record = {"notebook": notebook, "mode": mode, "git_commit": "0123456789abcdef", "date": "d"}
    (folder / "results.json").write_text(json.dumps({**record, "results": {"verdicts": table}}))


def test_gallery_shows_the_verdicts_of_full_runs_only(tmp_path):
    assert ablation.gallery_markdown(tmp_path) == "(no FULL results committed yet)"
    full = ablation.verdict_table([("Full claim", "1 vs 2", HOLDS)])
    smoke = ablation.verdict_table([("Smoke claim", "3 vs 4", FAILS)])
    _write_record(tmp_path, "b_full", "full", full)
    _write_record(tmp_path, "a_smoke", "smoke", smoke)
    gallery = ablation.gallery_markdown(tmp_path)
    assert full in gallery and "Smoke claim" not in gallery and "a_smoke" not in gallery
    assert gallery.startswith("### b_full") and "commit 0123456789ab," in gallery

    page = tmp_path / "page.md"
    page.write_text(f"intro\n{ablation.GALLERY_START}\nSTALE GALLERY\n{ablation.GALLERY_END}\noutro\n")
    assert ablation.update_gallery(page, root=tmp_path) and not ablation.update_gallery(page, root=tmp_path)
    text = page.read_text()
    assert full in text and "STALE" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="gallery"):
        ablation.update_gallery(page, root=tmp_path)


def _curves(train, val, **summary):
    return ablation.Curves("run", list(range(len(train))), train, list(range(len(val))), val, summary, "/nowhere")


@pytest.mark.parametrize(
    ("train", "val", "summary", "diverged"),
    [
        ([2.0, 1.5], [1.6], {}, False),
        ([2.0, math.nan], [1.6], {}, True),
        ([2.0, 1.5], [math.inf], {}, True),
        ([2.0, 1.5], [1.6], {"halted": True}, True),
        ([], [], {}, True),  # nothing trained is no result
    ],
)
def test_curves_diverged(train, val, summary, diverged):
    c = _curves(train, val, **summary)
    assert c.diverged is diverged
    assert (c.final_val == val[-1]) if val else math.isnan(c.final_val)
    assert c.final_or(4.17) == (4.17 if diverged else val[-1])


# The notebooks' verdict cells (run by verdict_cells.notebook_verdicts; the training-heavy
# notebooks are in test_verdicts_training.py) ------------------------------------------------

# causal_mask: the masked and the unmasked-trained model at two learning rates, three seeds each.
MASK_CLAIMS = (
    "Without the mask the training loss collapses (the model copies the visible next token)",
    "... but evaluation with the mask fails",
    "... and so does generation",
)
TRAIN, MASKED_VAL, CHARS = "final train loss", "val loss with the mask", "real-word character share of a sample"
MASK_LRS = (1e-3, 3e-3)


def mask_arm_name(masked: bool, lr: float) -> str:
    return f"{'masked' if masked else 'unmasked'}, lr {lr:g}"


def causal_mask(unmasked=None, masked=None, *, at=1e-3, lrs=MASK_LRS, seeds=SEEDS, fresh=None):
    """The verdicts at learning rate ``at`` (where ``unmasked``/``masked`` override the base
    numbers) and at every other rate of ``lrs`` (base numbers, which hold). The generation row reads
    the fresh seeds' arms: the same numbers, or ``fresh`` = (unmasked, masked) overrides of them."""
    n = len(seeds)
    base_m = {TRAIN: jitter(1.6, 0, 0.02), MASKED_VAL: jitter(1.7, 1, 0.02), CHARS: jitter(0.8, 2, 0.02)}
    base_u = {TRAIN: jitter(0.2, 1, 0.02), MASKED_VAL: jitter(3.5, 2, 0.05), CHARS: jitter(0.3, 0, 0.03)}
    extra = {"val loss as trained": [1.0] * 3, "real-word share of a sample": [0.5] * 3}
    first = lambda record: {k: v[:n] for k, v in record.items()}

    def arms_of(unmasked, masked):
        arms = {}
        for lr in lrs:
            arms[mask_arm_name(True, lr)] = arm(**first({**base_m, **extra, **((masked or {}) if lr == at else {})}))
            arms[mask_arm_name(False, lr)] = arm(**first({**base_u, **extra, **((unmasked or {}) if lr == at else {})}))
        return arms

    arms = arms_of(unmasked, masked)
    v = notebook_verdicts(
        "causal_mask",
        arms=arms,
        fresh_arms=arms if fresh is None else arms_of(*fresh),
        FRESH=tuple(s + 3 for s in seeds),
        samples={},
        all_curves={},
        fig_loss=None,
        fig_bar=None,
        configs={},
        SEEDS=seeds,
        LRS=lrs,
        arm_name=mask_arm_name,
    )
    assert len(v) == len(MASK_CLAIMS) * len(lrs)
    others = [v[f"{c} (lr {lr:g})"] for lr in lrs if lr != at for c in MASK_CLAIMS]
    assert n < 2 or others == [HOLDS] * len(others), "a change at one learning rate moved another's verdict"
    return [v[f"{c} (lr {at:g})"] for c in MASK_CLAIMS]


def test_causal_mask_verdicts():
    assert causal_mask() == [HOLDS, HOLDS, HOLDS]
    assert causal_mask(at=3e-3) == [HOLDS, HOLDS, HOLDS]
    assert causal_mask({TRAIN: jitter(0.9, 1, 0.02)})[0] == FAILS  # above half the masked 1.6
    assert causal_mask({TRAIN: jitter(0.9, 1, 0.02)}, at=3e-3)[0] == FAILS  # each rate is judged apart
    assert causal_mask({TRAIN: [0.7, 0.9, 0.8]})[0] == UNSURE  # -0.1, +0.09, +0.01 around 0.8
    assert causal_mask({MASKED_VAL: jitter(2.0, 1, 0.01)})[1] == FAILS  # worse by 0.3 < 0.5
    assert causal_mask({MASKED_VAL: [2.1, 2.2, 2.15]})[1] == UNSURE  # 0.45 +- 0.10 straddles 0.5
    assert causal_mask({CHARS: jitter(0.7, 0, 0.02)})[2] == FAILS  # only 0.1 fewer
    # generation is judged on the fresh seeds alone: seen seeds that fail do not move it, fresh ones do
    assert causal_mask({CHARS: jitter(0.7, 0, 0.02)}, fresh=(None, None))[2] == HOLDS
    assert causal_mask(fresh=({CHARS: jitter(0.7, 0, 0.02)}, None))[2] == FAILS
    assert causal_mask(fresh=({CHARS: [0.55, 0.65, 0.6]}, None), at=3e-3)[2] == UNSURE  # 0.2 fewer +- noise


def test_causal_mask_one_seed_is_never_a_verdict():
    assert causal_mask(seeds=(0,)) == [UNSURE] * 3
    assert causal_mask(seeds=(0,), at=3e-3) == [UNSURE] * 3


# attention_scaling: the probe's per-layer numbers by arm, seed, init / trained; final losses by arm and seed.
PROBE = {  # (arm, when, key): the mean over seeds; layers and seeds vary around it (``_measured``)
    **{
        (f"d_k={d} {arm}", "init", "logit_std"): s for d in (16, 64) for arm, s in (("unscaled", d**0.5), ("scaled", 1))
    },
    **{(f"d_k={d} {arm}", "trained", "logit_std"): s for d, arm, s in ((16, "unscaled", 3.5), (64, "unscaled", 6.0))},
    **{(f"d_k={d} scaled", "trained", "logit_std"): 1.5 for d in (16, 64)},
    **{
        (f"d_k={d} {arm}", when, "max_weight"): w
        for d in (16, 64)
        for when in ("init", "trained")
        for arm, w in (("unscaled", 0.8), ("scaled", 0.3))
    },
    **{
        (f"d_k={d} {arm}", when, "jacobian"): j
        for d in (16, 64)
        for when in ("init", "trained")
        for arm, j in (("unscaled", 0.2), ("scaled", 0.3))
    },
}


def _measured(**override):
    """``measured[arm][seed]`` as the notebook's probe stores it (4 layers), with ``override``
    ({"arm|when|key": mean}) replacing entries of `PROBE`; each arm and key varies by seed in its
    own way (1% sd), and the layers spread around the seed's value."""
    values = {**PROBE, **{tuple(k.split("|")): v for k, v in override.items()}}
    out: dict = {}
    for i, ((name, when, key), mean) in enumerate(sorted(values.items())):
        for s, e in zip(SEEDS, np.random.default_rng(i).normal(0.0, 0.01, len(SEEDS))):
            v = mean * (1 + e)
            out.setdefault(name, {}).setdefault(s, {}).setdefault(when, {})[key] = [v * 0.9, v * 1.1, v, v]
    return out


SCALING_FINAL = {
    "d_k=16 scaled": jitter(1.50, 0),
    "d_k=16 unscaled": jitter(1.55, 1),
    "d_k=64 scaled": jitter(1.50, 2),
    "d_k=64 unscaled": jitter(1.70, 0),
}
ENDS_WORSE_64, MORE_SO = "Training without the factor ends worse at d_k=64", "... and more so at larger d_k"
AT_INIT = "At init the unscaled logits have std ~ sqrt(d_k) (d_k={})"
GROWS, STAYS = (
    "Without the factor the logits grow with d_k (trained)",
    "With the factor the logit scale stays put as d_k grows (trained)",
)
SATURATES, JACOBIAN = "Without the factor the softmax saturates ({})", "... and the softmax gradient is small ({})"


def attention_scaling(measured=None, final=SCALING_FINAL):
    return notebook_verdicts(
        "attention_scaling",
        measured=measured or _measured(),
        final=final,
        SEEDS=SEEDS,
        curves={},
        sweeps={},
        fig_probe=None,
        fig_train=None,
        configs={},
    )


def test_attention_scaling_probe_verdicts_hold_on_the_notes_picture():
    v = attention_scaling()
    assert all(x == HOLDS for x in v.values()), v
    assert len(v) == 2 + 2 + 4 + 3


@pytest.mark.parametrize(
    ("override", "row", "verdict"),
    [
        ({"d_k=64 unscaled|init|logit_std": 16.0}, AT_INIT.format(64), FAILS),  # 2 sqrt(d_k): not the notes' regime
        ({"d_k=64 unscaled|trained|logit_std": 3.0}, GROWS, FAILS),  # training shrank the larger head's logits
        ({"d_k=64 unscaled|trained|logit_std": 3.515}, GROWS, UNSURE),  # no growth, within the noise
        ({"d_k=64 scaled|trained|logit_std": 3.0}, STAYS, FAILS),  # x2 > sqrt(2): the factor did not keep it
        ({"d_k=64 scaled|trained|logit_std": 2.12}, STAYS, UNSURE),  # x1.41 ~ the margin sqrt(2)
        ({"d_k=64 unscaled|trained|max_weight": 0.25}, SATURATES.format("trained"), FAILS),  # flatter than scaled
        ({"d_k=64 unscaled|init|jacobian": 0.4}, JACOBIAN.format("init"), FAILS),  # passes more gradient
        ({"d_k=64 unscaled|trained|jacobian": 0.3}, JACOBIAN.format("trained"), UNSURE),  # the same
    ],
)
def test_attention_scaling_probe_verdicts_turn(override, row, verdict):
    v = attention_scaling(_measured(**override))
    assert v[row] == verdict, v
    assert [r for r, x in v.items() if x != HOLDS] == [row], "only the changed row moves"


@pytest.mark.parametrize(
    ("unscaled_64", "ends_worse", "more_so"),
    [
        (jitter(1.70, 0), HOLDS, HOLDS),  # gap +0.20 at 64 (+0.05 at 16)
        ([1.51, 1.49, 1.52], UNSURE, FAILS),  # +0.01 +- noise: no sign; and a smaller gap than at 16
        (jitter(1.46, 0), FAILS, FAILS),  # unscaled ends better
        ([1.555, 1.56, 1.545], HOLDS, UNSURE),  # gap ~0.053 vs ~0.05: growth within the noise
    ],
)
def test_attention_scaling_training_verdicts(unscaled_64, ends_worse, more_so):
    v = attention_scaling(final={**SCALING_FINAL, "d_k=64 unscaled": unscaled_64})
    assert (v[ENDS_WORSE_64], v[MORE_SO]) == (ends_worse, more_so)


def test_attention_scaling_with_one_head_size_leaves_the_growth_unmeasured():
    v = attention_scaling(final={k: x for k, x in SCALING_FINAL.items() if k.startswith("d_k=16")})
    assert v["Training without the factor ends worse at d_k=16"] == HOLDS and v[MORE_SO] == UNSURE
    assert ENDS_WORSE_64 not in v


# positional_encoding: equivariance and RoPE spread by seed, losses by encoding, length and seed.
ENCODINGS = ("none", "sinusoidal", "sinusoidal_scaled", "learned", "relative_bias", "rope", "alibi")
GROWTH = {
    "none": 0.3,
    "sinusoidal": 0.4,
    "sinusoidal_scaled": 0.5,
    "learned": 0.9,
    "relative_bias": 0.2,
    "rope": 0.15,
    "alibi": 0.05,
}
PE_CLAIMS = (
    "Without positions the model cannot tell a sequence from its reordering",
    "With positions (sinusoidal, RoPE) the model reverses the sequence",
    "Without positions, self-attention is permutation-equivariant",
    "RoPE's dot product depends only on the relative offset",
    "Relative encodings degrade less than absolute ones at 4x the training length",
    "A learned table cannot extrapolate",
)
EQUIVARIANCE = {"none": [1e-7, 2e-7, 1.5e-7], "learned": [0.3, 0.25, 0.35], "rope": [0.2, 0.22, 0.18]}
# validation loss over the order-blind loss by arm: 1 is chance, 0 a perfect reversal
RATIO = {"reverse, none": 1.3, "sort, none": 0.01, "reverse, sinusoidal": 0.003, "reverse, rope": 0.001}


RELATIVE, ABSOLUTE = ("relative_bias", "rope", "alibi"), ("sinusoidal", "sinusoidal_scaled", "learned")
FRESH_LEN = (10, 11, 12, 13)  # the relative-vs-absolute row's fresh seeds


def positional_encoding(
    growth=GROWTH,
    equivariance=EQUIVARIANCE,
    rope_spread=(1e-7, 2e-7, 1e-7),
    ratio=RATIO,
    fresh=None,
    bag=1.53,
    fresh_growth=None,
):
    """The verdicts; claim 1 reads the fresh seeds' ratios: ``ratio``'s, or those of ``fresh``; the
    relative-vs-absolute row the fresh length runs' growth: ``growth``'s, or ``fresh_growth``."""
    eval_loss = {p: {64: jitter(1.5, i), 256: jitter(1.5 + growth[p], i + 1)} for i, p in enumerate(ENCODINGS)}
    four = lambda mean, k: [mean + 0.002 * j for j in np.roll([0.0, 1.0, -1.0, 0.5], k)]
    fresh_growth = growth if fresh_growth is None else fresh_growth
    fresh_len = {
        p: {64: four(1.5, i), 256: four(1.5 + fresh_growth[p], i + 1)} for i, p in enumerate(RELATIVE + ABSOLUTE)
    }
    spread = lambda ratios: {a: jitter(r, i, 0.01 * max(r, 0.1)) for i, (a, r) in enumerate(ratios.items())}
    v = notebook_verdicts(
        "positional_encoding",
        order_ratio=spread(ratio),
        fresh_ratio=spread(ratio if fresh is None else fresh),
        bag_ratio=jitter(bag, 7, 0.003),
        FRESH=(3, 4, 5),
        fresh_chance=[1.13, 1.14, 1.14],
        order_records={},
        order_sweeps={},
        chance=[1.15, 1.14, 1.16],
        fig_order=None,
        eval_loss=eval_loss,
        fresh_len=fresh_len,
        FRESH_LEN=FRESH_LEN,
        relative=RELATIVE,
        absolute=ABSOLUTE,
        ENCODINGS=ENCODINGS,
        EVAL_LENS=(64, 256),
        TRAIN_LEN=64,
        SEEDS=SEEDS,
        equivariance=equivariance,
        rope_spread=list(rope_spread),
        curves={},
        sweeps={},
        fig_rope=None,
        fig_len=None,
        configs={},
    )
    return [v[c] for c in PE_CLAIMS]


def test_positional_encoding_verdicts():
    assert positional_encoding() == [HOLDS] * 6
    # above chance without positions holds (the model need not reach the order-blind optimum); order
    # leaking in (10% below chance) refutes it, and so does a position-free model that cannot even sort
    assert positional_encoding(ratio={**RATIO, "reverse, none": 1.0})[0] == HOLDS
    assert positional_encoding(ratio={**RATIO, "reverse, none": 0.9})[0] == FAILS
    assert positional_encoding(ratio={**RATIO, "reverse, none": 0.95})[0] == UNSURE
    assert positional_encoding(ratio={**RATIO, "sort, none": 0.9})[0] == FAILS
    # two-sided: a position-free reversal that did not learn even the source's symbols (a diverged run
    # scored log 32 sits near 3) ends above the source-bag loss and refutes it; at the bag, inconclusive
    assert positional_encoding(ratio={**RATIO, "reverse, none": 3.0})[0] == FAILS
    assert positional_encoding(ratio={**RATIO, "reverse, none": 1.6})[0] == FAILS
    assert positional_encoding(ratio={**RATIO, "reverse, none": 1.53})[0] == UNSURE
    assert positional_encoding(ratio={**RATIO, "reverse, none": 1.45})[0] == HOLDS
    # claim 1 is judged on the fresh seeds alone: seen seeds that fail do not move it, fresh ones do
    assert positional_encoding(ratio={**RATIO, "reverse, none": 3.0}, fresh=RATIO)[0] == HOLDS
    assert positional_encoding(fresh={**RATIO, "reverse, none": 0.9})[0] == FAILS
    assert positional_encoding(fresh={**RATIO, "reverse, none": 1.3}, bag=1.2)[0] == FAILS
    assert positional_encoding(ratio={**RATIO, "reverse, rope": 0.9})[1] == FAILS  # RoPE did not learn the order
    assert positional_encoding(ratio={**RATIO, "reverse, sinusoidal": 0.5})[1] == UNSURE
    assert positional_encoding(equivariance={**EQUIVARIANCE, "none": [1e-3, 2e-3, 1.5e-3]})[2] == FAILS
    assert positional_encoding(equivariance={**EQUIVARIANCE, "rope": [1e-3, 2e-3, 1.5e-3]})[2] == FAILS
    assert positional_encoding(rope_spread=(0.01, 0.012, 0.011))[3] == FAILS
    assert positional_encoding({**GROWTH, "rope": 0.45})[4] == FAILS  # a relative one worse than sinusoidal
    assert positional_encoding({**GROWTH, "rope": 0.4})[4] == UNSURE  # a tie with the best absolute
    # every absolute arm counts: the embedding-scaled sinusoid degrading least turns the verdict
    assert positional_encoding({**GROWTH, "sinusoidal_scaled": 0.05})[4] == FAILS
    # judged on the fresh seeds alone: seeds 0-2 failing do not move it, fresh ones do
    assert positional_encoding({**GROWTH, "rope": 0.45}, fresh_growth=GROWTH)[4] == HOLDS
    assert positional_encoding(fresh_growth={**GROWTH, "rope": 0.45})[4] == FAILS
    assert positional_encoding({**GROWTH, "learned": 0.4})[5] == FAILS
