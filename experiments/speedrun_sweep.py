"""Sweep and report of the speedrun recipe (``shakespeare_speedrun.py``). Run on a quiet machine.

Each run is one whole ``transformer-jax train`` command (start-up, compile and evaluation
included), timed from before the process starts; its validation curve is kept against those
wall-clock seconds (each metrics record carries its Unix ``time``). Results accumulate per arm in
``experiments/results/speedrun/<arm>.json`` (a seed run again replaces its old entry).

    python experiments/speedrun_sweep.py run --arms recipe no_muon --seeds 0 1 2
    python experiments/speedrun_sweep.py run --arms nanogpt llama ngram6 --seeds 0
    python experiments/speedrun_sweep.py report   # table.md + curves.png from the stored runs

Arms: ``recipe`` and its one-change variants (``--set`` overrides on top of the recipe), and
the reference recipes ``nanogpt`` (the quickstart), ``llama`` and ``ngram6`` (the count baseline).
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
BUDGET_S = 600.0  # the whole command, on 2 cores

# AdamW with the recipe's AdamW-part settings (b2 0.95, no decay), as the Muon recipe's other parameters
ADAMW = ["train.optim.optimizer=adamw", "train.optim.optimizer.b2=0.95", "train.optim.optimizer.weight_decay=0"]
# arm -> (experiment file, --set overrides); the recipe's variants each change one ingredient
ARMS: dict[str, tuple[str, list[str]]] = {
    "recipe": ("shakespeare_speedrun.py", []),
    "no_muon": ("shakespeare_speedrun.py", [*ADAMW, "train.optim.lr=3e-3"]),  # the recipe's adam_lr
    "no_muon_lr6e-3": ("shakespeare_speedrun.py", [*ADAMW, "train.optim.lr=6e-3"]),
    "no_qk_norm": ("shakespeare_speedrun.py", ["model.attention.qk_norm=false"]),
    "gelu_not_relu2": ("shakespeare_speedrun.py", ["model.ffn=gelu"]),
    "no_zero_init": ("shakespeare_speedrun.py", ["model.init.zero_out=false"]),
    "no_softcap": ("shakespeare_speedrun.py", ["model.embeddings.final_softcap=null"]),
    "tied": ("shakespeare_speedrun.py", ["model.embeddings.tie=true"]),
    "nanogpt": ("shakespeare_char.py", []),
    "llama": ("shakespeare_char_llama.py", []),
    "ngram6": ("shakespeare_char_ngram.py", []),
}
REFERENCES = ("nanogpt", "llama", "ngram6")


def run_one(arm: str, seed: int, extra: list[str]) -> dict:
    """One whole training command; its final validation loss, tokens/s, wall-clock and curve."""
    config, sets = ARMS[arm]
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [
            sys.executable, "-m", "transformer_jax", "train", "--config", str(HERE / config), "--workdir", workdir,
            "--set", f"train.seed={seed}", *sets, *extra,
        ]  # fmt: skip
        started = time.time()
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            raise RuntimeError(f"{arm} seed {seed} failed:\n{out.stderr[-3000:]}")
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        records = [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    curve = [[r["time"] - started, r["step"], r["val/loss"]] for r in records if "val/loss" in r]
    return {
        "seed": seed,
        "sets": sets + extra,
        "wall_s": wall,
        "val_loss": summary["val_loss"],
        "tokens_per_s": summary.get("tokens_per_s"),
        "steps": summary["step"],
        "stopped": summary.get("stopped"),
        "curve": curve,
    }


def _store(arm: str, r: dict, tag: str | None = None) -> None:
    """Adds run ``r`` to ``<arm>.json`` (``<arm>-<tag>.json`` for exploration runs with extra
    overrides, which the table leaves out), replacing an earlier run of the same seed."""
    name = f"{arm}-{tag}" if tag else arm
    path = RESULTS / f"{name}.json"
    record = json.loads(path.read_text()) if path.exists() else {"arm": name, "config": ARMS[arm][0]}
    record["runs"] = [s for s in record.get("runs", []) if s["seed"] != r["seed"]] + [r]
    path.write_text(json.dumps(record, indent=1) + "\n")


def run(args: argparse.Namespace) -> None:
    """Seed-major (every arm of seed 0, then of seed 1, ...), so a drift of the machine's speed
    over the sweep falls on every arm alike instead of on whichever arm ran last."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for arm in args.arms:
            r = run_one(arm, seed, args.set)
            _store(arm, r, args.tag)
            print(
                f"{arm} seed {seed}: val_loss {r['val_loss']:.4f} in {r['wall_s']:.0f} s ({r['steps']} steps)",
                flush=True,
            )


def _load() -> dict[str, list[dict]]:
    found = {p.stem: json.loads(p.read_text())["runs"] for p in sorted(RESULTS.glob("*.json"))}
    return {arm: sorted(runs, key=lambda r: r["seed"]) for arm, runs in found.items() if runs}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def _interval(values: list[float]) -> str:
    from transformer_jax.ablation.stats import t_interval

    mean, low, high = t_interval(values)
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]" if len(values) > 1 else f"{mean:.3f} (n=1, no interval)"


def _order(arms: dict[str, list[dict]]) -> list[str]:
    return [a for a in ARMS if a in arms and a not in REFERENCES] + [a for a in REFERENCES if a in arms]


def table(arms: dict[str, list[dict]]) -> str:
    """Markdown: each arm's seeds, median and mean val loss (95% t interval), what the change costs
    against the recipe (seeds paired; verdict of "the ingredient helps": the difference > 0),
    tokens/s and wall-clock of the whole command."""
    from transformer_jax.ablation.stats import paired

    base = {r["seed"]: r["val_loss"] for r in arms.get("recipe", [])}
    lines = [
        "| arm | seeds | val loss per seed | median | mean [95% t] | val loss minus recipe's [95% paired t] "
        "| tokens/s | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in _order(arms):
        runs = arms[arm]
        vals = [r["val_loss"] for r in runs]
        common = [r["seed"] for r in runs if r["seed"] in base]
        diff = ""
        if arm != "recipe" and arm not in REFERENCES and common:
            own = {r["seed"]: r["val_loss"] for r in runs}
            c = paired([own[s] for s in common], [base[s] for s in common], expect="greater")
            diff = (
                f"{c.mean:+.3f} [{c.low:+.3f}, {c.high:+.3f}] (n={c.n}: {c.verdict})"
                if c.n > 1
                else f"{c.mean:+.3f} (n=1: {c.verdict})"
            )
        tps = [r["tokens_per_s"] for r in runs if r["tokens_per_s"] and r["steps"]]
        lines.append(
            f"| {arm} | {', '.join(str(r['seed']) for r in runs)} | {', '.join(f'{v:.4f}' for v in vals)} "
            f"| {_median(vals):.4f} | {_interval(vals)} | {diff} | {f'{_median(tps):,.0f}' if tps else '-'} "
            f"| {_median([r['wall_s'] for r in runs]):.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(arms: dict[str, list[dict]], out: Path) -> None:
    """Validation loss against wall-clock seconds of the whole command: the recipe's seeds (and
    its AdamW arm), the nanoGPT and llama recipes as they are (2,000 steps), and the 6-gram as a
    horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {"recipe": ("C0", "speedrun recipe"), "nanogpt": ("C1", "nanoGPT CPU recipe (quickstart)")}
    styles["llama"] = ("C2", "llama recipe")
    styles["no_muon"] = ("C3", "speedrun recipe with AdamW instead of Muon")
    for arm, (color, label) in styles.items():
        for i, r in enumerate(arms.get(arm, [])):
            t, _, v = zip(*r["curve"]) if r["curve"] else ((), (), ())
            ax.plot(t, v, "o-", color=color, ms=3, alpha=0.8, label=label if i == 0 else None)
    if "ngram6" in arms:
        v = _median([r["val_loss"] for r in arms["ngram6"]])
        ax.axhline(v, color="k", ls="--", lw=1, label=f"6-gram Kneser-Ney ({v:.3f})")
    ax.axhline(1.50, color="grey", ls=":", lw=1, label="target 1.50")
    ax.axvline(BUDGET_S, color="grey", ls="-.", lw=1, label="10-minute budget")
    ax.set(xlabel="wall-clock seconds of the whole command (2 CPU cores)", ylabel="validation loss (nats/char)")
    ax.set_ylim(1.35, 2.6)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(out, dpi=110, bbox_inches="tight")


def report(_: argparse.Namespace) -> None:
    arms = _load()
    text = table(arms)
    (RESULTS / "table.md").write_text(text)
    plot(arms, RESULTS / "curves.png")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run arms x seeds, storing each run")
    r.add_argument("--arms", nargs="+", default=["recipe"], choices=sorted(ARMS))
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--set", nargs="*", default=[], help="extra --set overrides for every run (exploration only)")
    r.add_argument("--tag", help="name for runs with --set: stored as <arm>-<tag>.json, left out of the table")
    r.set_defaults(func=run)
    sub.add_parser("report", help="table.md and curves.png from the stored runs").set_defaults(func=report)
    args = ap.parse_args()
    if getattr(args, "set", None) and not args.tag:
        ap.error("--set needs --tag: runs with extra overrides are stored apart from the arms' results")
    args.func(args)


if __name__ == "__main__":
    main()
