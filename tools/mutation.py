#!/usr/bin/env python
"""Mutation testing of the ``transformer_jax/ops`` modules with mutmut (not part of CI).

    python tools/mutation.py                      # the seven default modules
    python tools/mutation.py masks rope --max-children 2

Each module is mutated on its own against its fast tests (``MODULE_TESTS``, plus
``tests/ops/test_<module>_mutants.py`` when it exists), run as ``-x -q -p no:cacheprovider -n 0``.
Nothing in the checkout is touched: the package, the tests and ``pyproject.toml`` are copied to a
scratch folder, where mutmut writes its ``mutants/`` tree. The report (per-module killed /
survived / timeout / score, and every surviving mutant with file:line and its diff) goes to
``experiments/results/mutation/report.{md,json}``; modules not re-run keep their earlier entry.

Equivalent mutants (no behaviour can tell them apart) are listed with a reason in
``tools/mutation_equivalents.toml``; the report gives the raw score (all mutants) and the adjusted
score, whose denominator leaves the equivalent ones out.

mutmut (``pip install -c constraints.txt -e '.[dev]'`` brings the pinned version) runs each
mutant in a process forked from a fork server that has imported jax (not the package) but not
started a backend, and only the tests that reach the mutated function (found by a first "stats"
run, during which the jit caches are cleared after each test, so a test that reuses another test's
compiled function still counts as reaching it, and functions run at import time count as reached
by every test).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import mutation_report  # tools/, beside this script

ROOT = Path(__file__).resolve().parent.parent
MUTMUT_VERSION = "3.8.1"
EQUIVALENTS_FILE = ROOT / "tools" / "mutation_equivalents.toml"

# module (transformer_jax/ops/<module>.py) -> the fast tests that exercise it
MODULE_TESTS: dict[str, tuple[str, ...]] = {
    "masks": ("tests/ops/test_masks.py", "tests/ops/test_chunked_attention.py"),
    "attention": ("tests/ops/test_attention.py", "tests/ops/test_pallas_attention.py"),
    "residual": ("tests/ops/test_norms_residual.py",),
    "rope": ("tests/ops/test_rope.py",),
    "positions": ("tests/ops/test_positions.py",),
    "losses": ("tests/ops/test_losses.py",),
    "routing": ("tests/ops/test_routing.py", "tests/ops/test_moe_dispatch.py"),
}
DEFAULT_MODULES = tuple(MODULE_TESTS)

PYTEST_ARGS = ("-p", "no:cacheprovider", "-n", "0")  # mutmut adds -x -q itself
# Imported by the fork server before it forks the per-mutant workers; none of them may start a JAX
# backend (a forked XLA client would deadlock), so test modules are not preloaded. Nor is the package:
# each worker imports it after its mutant is set, so that functions called at import time (e.g.
# routing._flat, which builds registry entries) run mutated.
PRELOAD = (
    "numpy",
    "jax",
    "jax.numpy",
    "jaxtyping",
    "chex",
    "absl.testing.parameterized",
    "hypothesis",
)
PLUGIN = "_mutation_jax_plugin"
PLUGIN_SOURCE = '''"""Written by tools/mutation.py, for mutmut's stats run (which records the mutated functions
each test reaches): jit caches are cleared after each test, and functions reached while the test
modules are imported (registry entries built at import time) count as reached by every test."""

import os

import jax
import pytest

_AT_IMPORT = set()


def _stats():
    from mutmut.state import state

    return state()._stats


def _collecting_stats():
    return os.environ.get("MUTANT_UNDER_TEST") == "stats"


def pytest_collection_finish(session):
    if _collecting_stats():
        _AT_IMPORT.update(_stats())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    if _collecting_stats():
        jax.clear_caches()
        _stats().update(_AT_IMPORT)
'''
DIFF_HELPER = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = json.load(sys.stdin)
json.dump({n: get_diff_for_mutant(n, path=path) for n in names}, sys.stdout)
"""
DETECTED = ("killed", "timeout", "caught by type check", "segfault")


@dataclasses.dataclass
class Mutant:
    name: str
    status: str
    function: str = ""
    line: int = 0
    diff: str = ""
    equivalent: str | None = None  # the reason, when listed in mutation_equivalents.toml


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("modules", nargs="*", default=list(DEFAULT_MODULES), help=f"default: {' '.join(DEFAULT_MODULES)}")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "mutation")
    p.add_argument("--workdir", type=Path, help="scratch folder (default: a new temp folder, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (mutmut's mutants/ of each module)")
    p.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    p.add_argument(
        "--recheck-survivors",
        action="store_true",
        help="re-test only the mutants that the report's last run of a module left undetected, keeping its\n"
        "killed ones (valid while the module's source is unchanged, which is checked, and tests were only added)",
    )
    p.add_argument(
        "--timeout-constant",
        type=float,
        default=10.0,
        help="mutmut timeout_constant: a mutant times out after (tests' time + this) * 15 s wall (default 10)",
    )
    args = p.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULE_TESTS]
    if unknown:
        p.error(f"unknown module(s) {unknown}; choose from {list(MODULE_TESTS)} (or add one to MODULE_TESTS)")
    return args


def _check_mutmut() -> str:
    try:
        from importlib.metadata import version

        found = version("mutmut")
    except Exception:
        sys.exit(f"mutmut is not installed: pip install mutmut=={MUTMUT_VERSION} (or the dev extra)")
    if found != MUTMUT_VERSION:
        print(f"warning: mutmut {found} installed, this script was written for {MUTMUT_VERSION}", file=sys.stderr)
    return found


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def _copy_tree(dest: Path) -> None:
    """The package, the tests and pyproject.toml (tracked and untracked-not-ignored files)."""
    wanted = ("transformer_jax", "tests", "pyproject.toml")
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *wanted)
    if listed:
        for rel in filter(None, listed.split("\0")):
            src = ROOT / rel
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
    else:  # not a git checkout
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
        for name in wanted:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, dest / name, ignore=ignore)
            else:
                shutil.copy2(ROOT / name, dest / name)
    if "mutmut" in tomllib.loads((dest / "pyproject.toml").read_text()).get("tool", {}):
        sys.exit("pyproject.toml has a [tool.mutmut] table, which would override this script's setup.cfg")


def _tests_for(module: str, scratch: Path) -> list[str]:
    tests = [*MODULE_TESTS[module], f"tests/ops/test_{module}_mutants.py"]
    return [t for t in dict.fromkeys(tests) if (scratch / t).is_file()]


def _write_config(scratch: Path, module: str, tests: list[str], timeout_constant: float) -> None:
    def lines(values) -> str:
        return "".join(f"\n    {v}" for v in values)

    (scratch / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths = transformer_jax\n"
        f"only_mutate = transformer_jax/ops/{module}.py\n"
        f"pytest_add_cli_args_test_selection ={lines(tests)}\n"
        f"pytest_add_cli_args ={lines([*PYTEST_ARGS, '-p', PLUGIN])}\n"
        f"also_copy = {PLUGIN}.py\n"
        "process_isolation = forkserver\n"
        "forkserver_warmup = import\n"
        f"preload_modules_file = {scratch / 'preload.txt'}\n"
        f"timeout_constant = {timeout_constant}\n"
        "use_git_change_detection = false\n"
    )


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MUTANT_UNDER_TEST", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # let pytest cache its rewritten test modules in the scratch copy
    env.setdefault("JAX_PLATFORMS", "cpu")
    flags = env.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:  # as tests/conftest.py, before jax loads
        env["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["TRANSFORMER_JAX_TEST_CACHE"] = str(workdir / "jax_cache")  # mutants' programs stay out of ~/.cache
    return env


def _preload_modules() -> list[str]:
    """PRELOAD plus the pytest plugins (their entry points take most of a bare pytest start)."""
    from importlib.metadata import entry_points

    plugins = [ep.value.partition(":")[0] for ep in entry_points(group="pytest11")]
    return list(dict.fromkeys([*PRELOAD, *plugins]))


def _check_preload(scratch: Path, env: dict[str, str], modules: list[str]) -> None:
    code = (
        f"import importlib\nfor m in {modules!r}: importlib.import_module(m)\n"
        "from jax._src import xla_bridge\n"
        "assert not getattr(xla_bridge, '_backends', {}), 'importing the preloaded modules started a JAX backend'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=scratch, env=env, check=True)


def _load_equivalents() -> list[dict]:
    if not EQUIVALENTS_FILE.is_file():
        return []
    return tomllib.loads(EQUIVALENTS_FILE.read_text()).get("equivalent", [])


def _run_module(
    module: str, scratch: Path, env: dict[str, str], args, equivalents: list[dict], log: Path, previous: dict | None
) -> dict:
    from mutmut.stats import status_by_exit_code

    rel = f"transformer_jax/ops/{module}.py"
    tests = _tests_for(module, scratch)
    if not tests:
        sys.exit(f"no test file of {MODULE_TESTS[module]} exists")
    source = (scratch / rel).read_text()
    source_sha = hashlib.sha256(source.encode()).hexdigest()
    recheck = None
    if args.recheck_survivors:
        if previous and previous.get("source_sha256") == source_sha and previous.get("mutmut") == args.mutmut:
            recheck = [n for n, st in previous["statuses"].items() if st not in DETECTED]
        else:
            print(f"   {module}: no earlier result for this source and mutmut version; testing every mutant")
    shutil.rmtree(scratch / "mutants", ignore_errors=True)
    _write_config(scratch, module, tests, args.timeout_constant)
    what = "every mutant" if recheck is None else f"the {len(recheck)} earlier survivors"
    print(f"== {module}: {what} of {rel} against {' '.join(tests)} (log: {log})", flush=True)
    start = time.monotonic()
    statuses = {} if recheck is None else dict(previous["statuses"]) if previous else {}
    if recheck is None or recheck:
        with open(log, "w") as f:
            proc = subprocess.run(
                [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *(recheck or [])],
                cwd=scratch,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        meta = scratch / "mutants" / f"{rel}.meta"
        if proc.returncode != 0 or not meta.is_file():
            print(log.read_text()[-4000:], file=sys.stderr)
            sys.exit(f"mutmut failed on {module} (exit {proc.returncode}); see {log}")
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name in exit_codes if recheck is None else recheck:
            statuses[name] = status_by_exit_code[exit_codes[name]]
    runtime = time.monotonic() - start
    mutants = [Mutant(name, status) for name, status in statuses.items()]

    undetected = [m for m in mutants if m.status not in DETECTED]
    diffs = json.loads(
        subprocess.run(
            [sys.executable, "-c", DIFF_HELPER],
            cwd=scratch,
            env=env,
            input=json.dumps([rel, [m.name for m in undetected]]),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    source_lines = source.splitlines()
    spans = mutation_report.function_spans(source)
    used = set()
    for m in undetected:
        m.function, m.diff = mutation_report.function_of(m.name), diffs[m.name]
        m.line = mutation_report.line_of(m.diff, source_lines, spans.get(m.function, (1, 1))[0])
        removed, added = mutation_report.changed_text(m.diff)
        for i, e in enumerate(equivalents):
            same_place = (e["module"], e["function"]) == (module, m.function)
            if same_place and e["mutant"].strip() == added and e.get("original", removed).strip() == removed:
                m.equivalent = e["reason"]
                used.add(i)
    stale = [e for i, e in enumerate(equivalents) if e["module"] == module and i not in used]

    counts = {s: sum(m.status == s for m in mutants) for s in sorted({m.status for m in mutants})}
    detected = sum(m.status in DETECTED for m in mutants)
    n_equiv = sum(m.equivalent is not None for m in mutants)
    total = len(mutants)
    print(f"   {detected}/{total} detected, {n_equiv} equivalent, {runtime:.0f} s", flush=True)
    full_runtime = runtime if recheck is None else (previous or {}).get("full_run_runtime_s", 0.0)
    return {
        "file": rel,
        "source_sha256": source_sha,
        "mutmut": args.mutmut,
        "tests": tests,
        "commit": _git("rev-parse", "--short=12", "HEAD").strip() or None,
        "dirty": bool(_git("status", "--porcelain", "--", rel, *tests).strip()),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "runtime_s": round(runtime, 1),
        "full_run_runtime_s": round(full_runtime, 1),
        "rechecked": None if recheck is None else len(recheck),
        "total": total,
        "counts": counts,
        "detected": detected,
        "survived": total - detected,
        "equivalent": n_equiv,
        "score_raw": round(detected / total, 4) if total else None,
        "score_adjusted": round(detected / (total - n_equiv), 4) if total > n_equiv else None,
        "mutants": [dataclasses.asdict(m) for m in sorted(undetected, key=lambda m: (m.line, m.name))],
        "stale_equivalents": stale,
        "not_mutated": mutation_report.not_mutated(source, {mutation_report.function_of(n) for n in statuses}),
        "statuses": statuses,
    }


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if not 1 <= args.max_children <= 2:
        print("note: the project's machines have 2 cores; --max-children above 2 only adds contention")
    args.mutmut = _check_mutmut()
    workdir = Path(tempfile.mkdtemp(prefix="mutation-")) if args.workdir is None else args.workdir.resolve()
    scratch = workdir / "repo"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    started = time.monotonic()
    json_path = args.out / "report.json"
    old = json.loads(json_path.read_text()) if json_path.is_file() else {}
    modules = {m: old.get("modules", {}).get(m) for m in MODULE_TESTS}
    cmd = " ".join(["python tools/mutation.py", *(argv if argv is not None else sys.argv[1:])])
    try:
        _copy_tree(scratch)
        (scratch / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
        preload = _preload_modules()
        (scratch / "preload.txt").write_text("\n".join(preload) + "\n")
        env = _env(workdir)
        _check_preload(scratch, env, preload)
        equivalents = _load_equivalents()
        for module in args.modules:
            log = workdir / f"{module}.log"
            modules[module] = _run_module(module, scratch, env, args, equivalents, log, modules[module])
            if args.keep:
                shutil.move(scratch / "mutants", workdir / f"mutants-{module}")
            report = {
                "mutmut": args.mutmut,
                "command": cmd,
                "runtime_s_last_run": round(time.monotonic() - started, 1),
                "modules": {m: r for m, r in modules.items() if r is not None},
            }
            args.out.mkdir(parents=True, exist_ok=True)  # written after each module, so a failure keeps the rest
            json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
            (args.out / "report.md").write_text(mutation_report.markdown(report))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"scratch folder kept: {workdir}")
    print(f"report: {args.out / 'report.md'} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
