"""A fresh rerun was registered before it ran, by commit order, not by date (the machinery of
test_registration_order.py).

`ablation.exploratory` compares the *date* of a ``fresh`` `ablation.Revision` with the date of the data
it judges; every registration and rerun of 2026-12-05 share one date, so it cannot tell a revision
committed before its rerun from one written after the numbers were seen. Here the git history
decides, for every committed results.json and every stored claim with a ``fresh`` revision:

- R, the first commit whose ``notebooks/<nb>.py`` gives that claim that revision: a ``Revision(...)``
  call with ``fresh=True`` whose ``date``, ``change`` and ``reason`` read as the stored ones (a literal,
  or an f-string with literal parts, its fields as wildcards; any other expression matches nothing),
  whose ``seeds`` are the stored ones (a literal equal to them, or a ``range`` from a known start that
  gives them; any other expression matches nothing), and
  which sits in the ``Claim(...)``/``claim(...)`` call named as the claim or in a module-level helper or
  constant that call uses (decoding's ``RERUN``), not in another claim;
- the data it judges: the run summaries in ``experiments/results/<nb>/runs/`` of the revision's
  ``seeds`` (of every seed when it names none) that the results used (listed in ``reused_runs``, or
  trained by the sitting that wrote results.json: the same recorded commit);
- R must be a strict ancestor of the commit that first held each summary's content, at any path
  (the data committed after the revision, not with it; a summary moved later keeps its first commit),
  and an ancestor of (or the very) commit each run trained from and results.json was written from
  (their recorded ``git_commit``, ``-dirty`` or not: a revision only in the dirty tree was not
  registered); a recorded commit missing from the clone is a failure.

Needs the full history: `.ci/run` fetches it into a shallow clone (and warns that the test will be
skipped when it cannot); anywhere, the test is skipped in a shallow clone or outside git.
"""

import ast
import copy
import functools
import json
import pathlib
import re
import subprocess

from transformer_jax.ablation import registration

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = "experiments/results"


def git(repo: pathlib.Path, *args: str, check: bool = True, input: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check, input=input)
    return done.stdout


def is_ancestor(repo: pathlib.Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=repo, capture_output=True).returncode == 0


def known(repo: pathlib.Path, commit: str) -> bool:
    found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo, capture_output=True)
    return found.returncode == 0


def _pattern(node: ast.expr) -> str | None:
    """A regex for the strings ``node`` can evaluate to: a literal, an f-string with literal parts
    (its fields as wildcards), a ``+`` of them; None (matches nothing) for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        if not any(isinstance(v, ast.Constant) and v.value for v in node.values):
            return None
        return "".join(re.escape(str(v.value)) if isinstance(v, ast.Constant) else ".+?" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pattern(node.left), _pattern(node.right)
        return None if left is None or right is None else left + right
    return None


def _matches(node: ast.expr | None, text: object) -> bool:
    pattern = None if node is None else _pattern(node)
    return pattern is not None and isinstance(text, str) and re.fullmatch(pattern, text, re.S) is not None


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def _argument(call: ast.Call, keyword: str, position: int) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == keyword:
            return k.value
    return call.args[position] if len(call.args) > position else None


def _number(node: ast.expr, definitions: dict[str, ast.AST]) -> int | None:
    """``node``'s integer value: a literal, a module-level name bound to one, a ``+``/``-`` of them;
    None when it is anything else (a call such as ``POWER.n()`` is not evaluated here)."""
    if isinstance(node, ast.Name) and isinstance(definitions.get(node.id), ast.expr):
        return _number(definitions[node.id], {k: v for k, v in definitions.items() if k != node.id})
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        a, b = _number(node.left, definitions), _number(node.right, definitions)
        return None if a is None or b is None else a + b if isinstance(node.op, ast.Add) else a - b
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _same_seeds(node: ast.expr | None, seeds: list[int] | None, definitions: dict[str, ast.AST]) -> bool:
    """Whether a ``seeds=`` argument names ``seeds`` (stored): a literal must equal them; a
    ``range(start, stop)`` (in ``tuple``/``list``/``sorted``) must give them, its start known (a literal
    or a module-level constant) and its stop where known, else stored seeds consecutive from start;
    anything else matches nothing, and no argument only where no seeds are stored."""
    stored = list(seeds or ())
    if node is None:
        return not stored
    while isinstance(node, ast.Call) and _name(node) in ("tuple", "list", "sorted") and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Call) and _name(node) == "range" and 1 <= len(node.args) <= 2 and not node.keywords:
        bounds = [_number(a, definitions) for a in node.args]
        start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
        if start is None:
            return False
        stop = start + len(stored) if stop is None and stored else stop
        return stop is not None and stored == list(range(start, stop))
    try:
        return list(ast.literal_eval(node)) == stored
    except (ValueError, TypeError, SyntaxError):
        return False


def _is_revision(node: ast.AST, rev: dict, definitions: dict[str, ast.AST]) -> bool:
    """Whether ``node`` is a ``Revision(date, change, reason, seen, fresh=True, seeds)`` call that
    reads as the stored ``rev`` (``definitions``: the module-level names its seeds may use)."""
    if not isinstance(node, ast.Call) or _name(node) != "Revision":
        return False
    fresh = _argument(node, "fresh", 4)
    return (
        isinstance(fresh, ast.Constant)
        and fresh.value is True
        and all(_matches(_argument(node, k, i), rev.get(k)) for i, k in enumerate(("date", "change", "reason")))
        and _same_seeds(_argument(node, "seeds", 5), rev.get("seeds"), definitions)
    )


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level name -> the node that defines it (an assignment's value, a def)."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            found[node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = node
    return found


class _Bind(ast.NodeTransformer):
    """Replaces a lambda's parameters by the arguments of one call of it."""

    def __init__(self, arguments: dict[str, ast.expr]) -> None:
        self.arguments = arguments

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.arguments.get(node.id, node)


def _inlined(call: ast.Call, definitions: dict[str, ast.AST]) -> ast.AST | None:
    """The body of the module-level lambda ``call`` calls, with the call's arguments in place of its
    parameters (``FRESH("2026-12-06")`` reads as the Revision it makes); None for any other call."""
    f = definitions.get(getattr(call.func, "id", ""))
    if not isinstance(f, ast.Lambda):
        return None
    names = [a.arg for a in f.args.args]
    arguments = dict(zip(names, call.args)) | {k.arg: k.value for k in call.keywords if k.arg in names}
    return _Bind(arguments).visit(copy.deepcopy(f.body))


def _within(node: ast.AST, definitions: dict[str, ast.AST]) -> list[ast.AST]:
    """``node``'s subtree and, transitively, those of the module-level names it uses (the helpers
    and constants a claim call draws its history from), a lambda helper's body with each call's
    arguments bound."""
    seen: set[str] = set()
    todo, found = [node], []
    while todo:
        for sub in ast.walk(todo.pop()):
            found.append(sub)
            if isinstance(sub, ast.Call) and (body := _inlined(sub, definitions)) is not None:
                todo.append(body)
            if isinstance(sub, ast.Name) and sub.id in definitions and sub.id not in seen:
                seen.add(sub.id)
                todo.append(definitions[sub.id])
    return found


def holds_revision(source: str, claim: str, rev: dict) -> bool:
    """Whether ``source`` (a notebook's text) has a ``Claim(...)``/``claim(...)`` call named ``claim``
    with, in it or in a module-level helper or constant it uses, a fresh ``Revision`` reading as ``rev``."""
    tree = ast.parse(source)
    definitions = _definitions(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _name(node) not in ("Claim", "claim"):
            continue
        if _matches(_argument(node, "name", 0), claim) and any(
            _is_revision(sub, rev, definitions) for sub in _within(node, definitions)
        ):
            return True
    return False


def _versions(repo: pathlib.Path, path: str) -> list[tuple[str, str]]:
    """(commit, text of ``path`` there) for each commit that changed ``path``, parents before children."""
    commits = git(repo, "log", "--reverse", "--topo-order", "--format=%H", "--", path).split()
    if not commits:
        return []
    batch = "".join(f"{c}:{path}\n" for c in commits).encode()
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=batch, capture_output=True, check=True).stdout
    versions, at = [], 0
    for commit in commits:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3:  # "<blob> blob <size>"; else "<name> missing" (the file deleted there)
            size = int(header[2])
            versions.append((commit, out[at : at + size].decode()))
            at += size + 1
    return versions


def registered_at(repo: pathlib.Path, notebook: str, claim: str, rev: dict) -> str | None:
    """The first commit (parents before children) whose ``notebooks/<notebook>.py`` gives claim
    ``claim`` the fresh revision ``rev``; None if none does."""
    for commit, source in _versions(repo, f"notebooks/{notebook}.py"):
        try:
            if "Revision" in source and holds_revision(source, claim, rev):
                return commit
        except SyntaxError:
            continue
    return None


@functools.cache
def _first_commits(repo: pathlib.Path, head: str) -> dict[str, str]:
    """Blob -> the earliest commit of ``head``'s history that holds it, at any path."""
    first: dict[str, str] = {}
    commit = ""
    options = ("--reverse", "--topo-order", "--diff-merges=first-parent", "--raw", "--no-abbrev", "--no-renames")
    for line in git(repo, "log", *options, "--format=commit %H", head).splitlines():
        if line.startswith("commit "):
            commit = line.split()[1]
        elif line.startswith(":"):
            first.setdefault(line.split("\t", 1)[0].split()[3], commit)
    return first


def first_added(repo: pathlib.Path, paths: list[str]) -> dict[str, str]:
    """File path -> the earliest commit of HEAD's history that holds its present content anywhere
    (so a file moved or copied keeps the commit that first committed it); absent if none does."""
    if not paths:
        return {}
    blobs = git(repo, "hash-object", "--stdin-paths", input="\n".join(paths) + "\n").split()
    first = _first_commits(repo, git(repo, "rev-parse", "HEAD").strip())
    return {path: first[blob] for path, blob in zip(paths, blobs) if blob in first}


def judged_runs(repo: pathlib.Path, notebook: str, record: dict, seeds: list[int]) -> dict[str, str]:
    """Run summary path (repository-relative) -> the commit it trained from, for the summaries of
    ``seeds`` (all if empty, kept measurements such as a timing included) that ``record`` used."""
    runs = repo / RESULTS / notebook / "runs"
    reused = {str(v).split(" ", 1)[0].rsplit("/", 1)[-1] for v in (record.get("reused_runs") or {}).values()}
    found = {}
    for p in sorted(runs.glob("*.json")) if runs.is_dir() else []:
        run = json.loads(p.read_text())
        if ("seed" not in run and seeds) or (seeds and run["seed"] not in seeds):
            continue  # a kept measurement (no seed: a timing) is judged by a revision that names no seeds
        if p.name in reused or run.get("git_commit") == record.get("git_commit"):
            found[str(p.relative_to(repo))] = str(run.get("git_commit") or "")
    return found


def pending_record(repo: pathlib.Path, notebook: str) -> dict | None:
    """For a redo in progress: its snapshot's claims (``registered.json``) and, as the runs they
    judge, every run summary trained after the committed results.json (`registration.redo_runs`);
    None without a snapshot."""
    snapshot = registration.read_snapshot(notebook, repo)
    if snapshot is None:
        return None
    runs = registration.redo_runs(notebook, repo)
    return {"claims": snapshot["claims"], "reused_runs": {p.name: p.name for p in runs}}


def registration_problems(repo: pathlib.Path, notebook: str, record: dict | None = None) -> list[str]:
    """Why the fresh revisions of ``notebook``'s committed results.json (or of ``record``, a redo in
    progress: `pending_record`, whose claims may have no runs yet) were not committed before the data
    they judge (see the module docstring); empty when they were."""
    pending = record is not None
    record = record if pending else json.loads((repo / RESULTS / notebook / "results.json").read_text())
    runs_folder = repo / RESULTS / notebook / "runs"
    summaries = sorted(runs_folder.glob("*.json")) if runs_folder.is_dir() else []
    added = first_added(repo, [str(p.relative_to(repo)) for p in summaries])
    problems = []
    for name, spec in (record.get("claims") or {}).items():
        for rev in spec.get("history") or ():
            if not rev.get("fresh"):
                continue
            where = f"{notebook}: {name!r}, revision {rev['change']!r}"
            r = registered_at(repo, notebook, name, rev)
            if r is None:
                problems.append(f"{where}: no commit of notebooks/{notebook}.py gives the claim this revision")
                continue
            runs = judged_runs(repo, notebook, record, list(rev.get("seeds") or ()))
            if not runs and not pending:
                problems.append(f"{where}: no run summary of seeds {rev.get('seeds')} among the results' runs")
            trained = {"results.json": str(record.get("git_commit") or ""), **runs}
            for path, commit in trained.items():
                commit = commit.removesuffix("-dirty")
                if not commit:
                    continue
                if not known(repo, commit):
                    problems.append(f"{where}: {path} ran from {commit[:12]}, a commit not in this clone's history")
                elif not is_ancestor(repo, r, commit):
                    problems.append(f"{where}: registered in {r[:12]}, after {path} ran from {commit[:12]}")
            for path in runs:
                a = added.get(path)
                if a is None:
                    problems.append(f"{where}: {path} is not committed")
                elif a == r or not is_ancestor(repo, r, a):
                    problems.append(f"{where}: registered in {r[:12]}, not before {path} was committed ({a[:12]})")
    return problems


def history_missing(repo: pathlib.Path) -> str | None:
    """Why ``repo``'s history cannot be read here (None when it can)."""
    try:
        shallow = git(repo, "rev-parse", "--is-shallow-repository").strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{repo} is not a git checkout"
    return "a shallow clone lacks the commits that registered the claims" if shallow == "true" else None
