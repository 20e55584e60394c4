"""Claims registered before the run (`ablation.claims`): specs that judge the comparisons saved
under them, the power calculation, exploratory rows, checks out of the verdict table, and SMOKE
verdicts that say they decide nothing."""

import dataclasses
import json
import math

import pytest

from transformer_jax import ablation

HOLDS, FAILS, UNSURE = ablation.VERDICTS
OLD = ablation.Revision("2026-12-05", "registered", "written down after the run")


def _claim(name="Fine experts do at least as well", margin=0.01, **kw):
    wording = {"says": "finer experts specialise better", "lines": (12, 14)}
    return ablation.Claim(
        name,
        notes="002.txt",
        measure="loss fine - coarse",
        criteria=(ablation.Criterion("not greater", margin=margin),),
        why="negligible",
        n=3,
        **{**wording, **kw},
    )


def test_criterion_takes_a_margin_for_an_equivalence_only():
    assert ablation.Criterion("less").level == 0.95 and ablation.Criterion("equal", margin=0.1).level == 0.90
    for bad in (dict(expect="less", margin=0.1), dict(expect="equal"), dict(expect="smaller")):
        with pytest.raises(ValueError):
            ablation.Criterion(**bad)  # type: ignore[arg-type]


def test_check_claims_refuses_comparisons_judged_otherwise():
    specs = ablation.register(_claim())
    fine, coarse = [1.70, 1.72, 1.69], [1.71, 1.70, 1.70]
    ablation.check_claims(specs, {specs[0].name: ablation.paired(fine, coarse, expect="not greater", margin=0.01)})
    with pytest.raises(ValueError, match="registered"):  # the margin was widened after the fact
        ablation.check_claims(specs, {specs[0].name: ablation.paired(fine, coarse, expect="not greater", margin=0.05)})
    with pytest.raises(ValueError, match="matches 0 registered claims"):
        ablation.check_claims(specs, {"Another claim": ablation.paired(fine, expect="less")})
    with pytest.raises(ValueError, match="without a verdict row"):
        ablation.check_claims(specs, {})
    with pytest.raises(ValueError, match="declared twice or also matches"):
        ablation.register(_claim("A"), _claim("A (lr 0.1)"))


def test_criteria_judge_blocks_of_parts_and_rows_named_after_the_claim():
    two = ablation.Claim(
        "Gradient slope",
        notes="000.txt",
        says="s",
        measure="m",
        criteria=(ablation.Criterion("equal", 1.0, 0.5), ablation.Criterion("equal", 0.0, "1/L")),
        why="w",
        n=8,
    )
    post = [ablation.paired([1.0, 1.1, 0.9], expect="equal", reference=1.0, margin=0.5)] * 2
    pre = [ablation.paired([0.0, 0.01, -0.01], expect="equal", margin=1 / d) for d in (6, 18)]
    ablation.check_claims([two], {"Gradient slope at 6 and 18 layers": post + pre})
    with pytest.raises(ValueError, match="part 2"):  # the blocks swapped: pre judged against 1 +- 0.5
        ablation.check_claims([two], {"Gradient slope": post[:1] + pre[:1] + post[:1] + pre[:1]})
    unmeasured = ablation.Comparison.unmeasured("less", "diverged")
    ablation.check_claims([two], {"Gradient slope": [unmeasured]})  # nothing measured: nothing to judge


def test_power_n_for_a_direction_and_an_equivalence():
    # effect = 1 sd, power 0.8: 8 at one-sided alpha 0.05 (noncentral t: power 0.815 at 8, 0.754 at 7); a direction's
    # verdict reads a two-sided 95% interval, one-sided 0.025, the default: 10 (noncentral t: 0.803 at 10, 0.746 at 9)
    assert ablation.Power(sd=1.0, effect=1.0, pilot="p", alpha=0.05).n() == 8
    assert ablation.Power(sd=1.0, effect=1.0, pilot="p").n() == 10
    # issue 39's audit: a 0.01-nat margin with a paired sd of 0.024 needs ~50 seeds, not 3 (90%: 0.05 per side)
    assert ablation.Power(sd=0.0243, effect=0.01, pilot="p", equivalence=True).n() == 53
    record = _claim(power=ablation.Power(sd=0.0243, effect=0.01, pilot="p", equivalence=True)).as_dict()
    assert record["power"]["n"] == 53 and record["alpha"] == 0.05 and record["n"] == 3


@pytest.mark.parametrize("bad", [{"alpha": 0.95}, {"alpha": 0.0}, {"power": 80}, {"power": 1.0}])
def test_power_refuses_an_alpha_or_power_that_is_not_a_rate(bad):
    with pytest.raises(ValueError, match="one-sided error rate"):
        ablation.Power(sd=1.0, effect=1.0, pilot="p", **bad)


@pytest.mark.parametrize(("sd", "effect", "alpha"), [(1.0, 1.0, 0.025), (0.055, 0.15, 0.025), (0.0243, 0.025, 0.05)])
def test_power_achieved_inverts_n_and_errs_below_the_noncentral_t(sd, effect, alpha):
    from scipy import stats  # an independent reference: the exact power of a one-sided paired t test

    power = ablation.Power(sd=sd, effect=effect, pilot="p", alpha=alpha)
    n = power.n()
    assert power.achieved(n) >= 0.8 > power.achieved(n - 1)
    for m in (n - 1, n, n + 2):
        exact = 1 - stats.nct.cdf(stats.t.ppf(1 - alpha, m - 1), m - 1, math.sqrt(m) * effect / sd)
        assert power.achieved(m) <= exact + 0.01


def test_a_row_short_of_its_power_at_the_verdicts_own_alpha_is_labelled_underpowered():
    at_90 = ablation.Power(sd=0.055, effect=0.15, pilot="p", alpha=0.05)  # 3 seeds at 0.05, 4 at 0.025
    short = ablation.Claim("Gen", "n.txt", "s", "m", (ablation.Criterion("less", -0.2),), "w", n=3, power=at_90)
    assert "power 0.64 at the verdict's one-sided alpha 0.025 (4 needed" in str(short.underpowered())
    assert dataclasses.replace(short, n=4).underpowered() is None
    spec = json.loads(json.dumps(short.as_dict()))
    assert spec["alpha"] == 0.025 and spec["underpowered"] and ablation.claims.from_spec(spec) == short
    # derived fields change no criterion, and a stale one is computed again from the stored spec
    stale = {**spec, "alpha": 0.05}
    del stale["underpowered"]
    assert ablation.criterion_spec(stale) == ablation.criterion_spec(spec)
    again = ablation.claims.reword({"claims": {"Gen": stale}}, [short])["claims"]["Gen"]
    assert again["alpha"] == 0.025 and again["underpowered"] == spec["underpowered"]
    # power.n is derived too; a claim the notebook no longer registers is recomputed as well
    stale["power"] = {**spec["power"], "n": 99}
    assert ablation.criterion_spec(stale) == ablation.criterion_spec(spec)
    gone = ablation.claims.reword({"claims": {"Gen": stale}}, [])["claims"]["Gen"]
    assert gone == spec and gone["power"]["n"] == 3


def test_a_criterion_changed_after_the_numbers_is_exploratory_until_rerun_on_new_data():
    changed = ablation.Revision("2026-12-03", "margin 0.5", "after a 'does not hold'", seen="2026-12-02")
    run = {"date": "2026-12-03 21:54:09 UTC", "reused_runs": {"a s0": "a.json (trained 2026-12-02 08:00:00 UTC, c)"}}
    assert ablation.data_date(run) == "2026-12-02 08:00:00"
    spec = lambda *h: json.loads(json.dumps(_claim(history=h).as_dict()))
    assert not ablation.exploratory(spec(OLD), run)
    assert ablation.exploratory(spec(OLD, changed), run)
    fresh = ablation.Revision("2026-12-06", "rerun", "seeds 3-5, never run before", fresh=True)
    assert ablation.exploratory(spec(OLD, changed, fresh), run)  # the same old runs reused: still exploratory
    rerun = {"date": "2026-12-07 10:00:00 UTC", "started": "2026-12-06 09:00:00 UTC"}
    assert not ablation.exploratory(spec(OLD, changed, fresh), rerun)
    assert ablation.exploratory(spec(OLD, fresh, changed), rerun)  # changed again after the rerun


def test_a_rerun_on_fresh_seeds_is_dated_by_its_own_seeds_only():
    changed = ablation.Revision("2026-12-05", "a direction", "the margin was out of reach", seen="2026-12-03")
    fresh = ablation.Revision("2026-12-05", "rerun", "seeds 3-4, never run before", fresh=True, seeds=(3, 4))
    old = "x.json (trained 2026-12-03 10:00:00 UTC, c)"
    new = "y.json (trained 2026-12-05 19:00:00 UTC, c)"
    # the same results hold other claims' runs on the seen seeds 0-2 and the dev sweep's (seed 0)
    run = {"started": "2026-12-06 09:00:00 UTC", "reused_runs": {"a s0": old, "a lr=0.003 dev s0": old, "b s3": new}}
    assert ablation.data_date(run) == "2026-12-03 10:00:00"
    assert ablation.data_date(run, (3, 4)) == "2026-12-05 19:00:00"
    assert ablation.data_date(run, (13,)) == "2026-12-06 09:00:00"  # none reused: the sitting's start
    spec = lambda *h: json.loads(json.dumps(_claim(history=h).as_dict()))
    assert not ablation.exploratory(spec(OLD, changed, fresh), run)
    assert ablation.exploratory(spec(OLD, changed, dataclasses.replace(fresh, seeds=())), run)  # every run dates it
    run["reused_runs"]["b s4"] = old  # a run of a fresh seed trained before the revision: not fresh
    assert ablation.exploratory(spec(OLD, changed, fresh), run)
    assert "seeds" not in spec(OLD)["history"][0] and spec(OLD, fresh)["history"][1]["seeds"] == [3, 4]


def test_gallery_moves_checks_out_of_the_verdicts_and_labels_exploratory_rows(tmp_path, monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    changed = ablation.Revision("2026-12-03", "margin", "after the numbers", seen="2026-12-03")
    specs = ablation.register(
        _claim("Decided before"),
        _claim("Decided after", history=(OLD, changed)),
        _claim("An identity", check=True),
        _claim("Not in the notes", lines=None),
        _claim("Too few", power=ablation.Power(sd=1.0, effect=1.0, pilot="p")),
    )
    rows = [("Decided before (lr 0.1)", "m1", HOLDS), ("Decided after", "m|2", UNSURE), ("An identity", "m3", HOLDS)]
    rows += [("Not in the notes", "m4", FAILS), ("Too few", "m5", UNSURE)]
    folder = tmp_path / "experiments" / "results" / "demo"
    folder.mkdir(parents=True)
    record = {"notebook": "demo", "mode": "full", "date": "2026-12-03 10:00:00 UTC", "protocol": ablation.PROTOCOL}
    parts = {  # each verdict row's comparisons, as a notebook stores them
        "Decided before (lr 0.1)": [ablation.paired([0.2, 0.3, 0.4], expect="greater").as_dict()],
        "Decided after": [
            ablation.paired([0.2, 0.3, 0.4], expect="equal", margin=0.1, reference=1.0).as_dict(),
            ablation.paired([0.2, 0.3, 0.4], expect="not greater", margin=0.05).as_dict(),
        ],
    }
    results = {"verdicts": ablation.verdict_table(rows), "comparisons": parts}
    record |= {"results": results, "claims": ablation.spec_record(specs)}
    (folder / "results.json").write_text(json.dumps(record))
    md = ablation.gallery_markdown(tmp_path)
    verdicts, checks = md.split("Checks:")
    assert "| claim | measured | refuted by | verdict |" in verdicts
    assert "| Decided before (lr 0.1) | m1 | 95% interval wholly below 0 | holds |" in verdicts
    assert (
        "| Decided after | m\\|2 | either part: 90% interval wholly outside [0.9, 1.1]; 90% interval wholly above "
        "0.05 | inconclusive (exploratory) |" in verdicts
    )
    assert "An identity" not in verdicts and "| An identity | negligible | m3 | agrees |" in checks
    assert "| Not in the notes | m4 | not recorded | does not hold (not a claim of the notes) |" in verdicts
    assert "| Too few | m5 | not recorded | inconclusive (underpowered) |" in verdicts and "*underpowered*:" in verdicts
    said = "- *Decided before*: finer experts specialise better (notes `002.txt`, lines 12-14)"
    assert said in verdicts and "*Not in the notes*:" not in md and "*An identity*:" not in md


def test_wording_changes_no_criterion_and_lines_are_checked():
    spec = ablation.spec_record([_claim()])["Fine experts do at least as well"]
    reworded = ablation.spec_record([_claim(says="other words", lines=(3, 3))])["Fine experts do at least as well"]
    assert spec != reworded and ablation.criterion_spec(spec) == ablation.criterion_spec(reworded)
    assert ablation.criterion_spec(spec) != ablation.criterion_spec(
        ablation.spec_record([_claim(margin=0.02)])[spec["name"]]
    )
    with pytest.raises(ValueError, match="lines"):
        _claim(lines=(5, 4))


def test_smoke_verdicts_say_they_decide_nothing(monkeypatch):
    rows = [("c1", "m1", HOLDS), ("c2", "m2", FAILS)]
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    lines = ablation.verdict_table(rows).splitlines()[2:]
    assert lines == [
        "| c1 | m1 | SMOKE (decides nothing): holds |",
        "| c2 | m2 | SMOKE (decides nothing): does not hold |",
    ]
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    assert "SMOKE" not in ablation.verdict_table(rows)


def test_save_results_stores_the_specs_it_ran_under_and_refuses_others(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")  # results go to a temporary folder
    specs = ablation.register(_claim())
    good = {specs[0].name: ablation.paired([1.70, 1.72, 1.69], [1.71, 1.7, 1.7], expect="not greater", margin=0.01)}
    out = ablation.save_results("claims_demo", {"verdicts": ""}, comparisons=good, claims=specs)
    record = json.loads((out / "results.json").read_text())
    assert record["claims"] == json.loads(json.dumps(ablation.spec_record(specs))) and "started" in record
    bad = {specs[0].name: ablation.paired([1.70, 1.72, 1.69], expect="less", reference=1.8)}
    with pytest.raises(ValueError, match="registered"):
        ablation.save_results("claims_demo", {"verdicts": ""}, comparisons=bad, claims=specs)
