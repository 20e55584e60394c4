"""The documentation, checked without building it (CI builds the site in ``.ci/checks`` with
``mkdocs build --strict``, where a warning is an error).

- Every name in README.md's Public API table resolves, and has its entry on an API page: a
  mkdocstrings directive (``::: transformer_jax.ops.masks``) in ``docs/api/*.md`` names it, or names
  the module that defines it (or lists it in ``__all__``), which is what mkdocstrings renders.
- README.md stays short and its relative links (into ``docs/``) lead to files and headings that exist.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pathlib
import re
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TABLE_START, TABLE_END = "<!-- --8<-- [start:api-table] -->", "<!-- --8<-- [end:api-table] -->"
PACKAGE = "transformer_jax"


# README's API table --------------------------------------------------------------------------


def api_table(text: str) -> list[tuple[str, str]]:
    """(what, import) cells of the table between the api-table markers (docs/api/index.md includes it)."""
    assert TABLE_START in text and TABLE_END in text, f"README.md lost its {TABLE_START} ... {TABLE_END} markers"
    lines = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip().splitlines()
    assert lines[0].startswith("| what | import |") and set(lines[1]) <= set("|- "), lines[:2]
    return [tuple(line.strip().strip("|").rsplit(" | ", 1)) for line in lines[2:]]


_NAME_EXPR = re.compile(r"([A-Za-z_][\w.]*)(\(.*\))?")  # a dotted name, maybe called: `f(x, k=...)(y)`


def names_in_cell(cell: str) -> list[str]:
    """The names a cell's code spans give, in order: ``transformer_jax.x.y`` in full, ``nn.mlp.X``
    abbreviated, bare ``causal_mask`` (read against the name before it), and the classes called in
    arguments (``RopeScaling(...)``). Spans that are not a name (``graphdef, params``) are prose."""
    names = []
    for span in re.findall(r"`([^`]+)`", cell):
        match = _NAME_EXPR.fullmatch(span.strip())
        if match is None:
            continue
        names.append(match.group(1))
        names += re.findall(r"\b([A-Z]\w*)\(", match.group(2) or "")
    return names


def resolve(dotted: str):
    """The object at a dotted path: attributes first (``eval.perplexity`` is the function the
    package exports), submodules imported where no attribute exists yet."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, types.ModuleType):
            obj = importlib.import_module(".".join(parts[: i + 1]))
        else:
            raise AttributeError(f"{'.'.join(parts[:i])} has no {part!r}")
    return obj


def _resolves(dotted: str) -> bool:
    try:
        resolve(dotted)
    except (ImportError, AttributeError):
        return False
    return True


def _canonical(full: str) -> str:
    """Where a class or function is defined (``transformer_jax.data.HFTokenizer`` ->
    ``transformer_jax.data.hf_tokenizer.HFTokenizer``); other objects keep their path."""
    obj = resolve(full)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    return full


def table_names(text: str) -> list[tuple[str, str]]:
    """(name as written, full dotted path) for every name in the table's import column."""
    out = []
    for _, cell in api_table(text):
        contexts = [PACKAGE]
        for name in names_in_cell(cell):
            if name.startswith(PACKAGE + "."):
                candidates = [name]
            elif "." in name:
                candidates = [f"{PACKAGE}.{name}"]
            else:  # a bare name: beside the name before it (as written, then where it is defined), or above
                candidates = []
                for context in contexts:
                    scopes = context.split(".")
                    candidates += [".".join(scopes[:k] + [name]) for k in range(len(scopes), 0, -1)]
            full = next((c for c in candidates if _resolves(c)), None)
            out.append((name, full or candidates[0]))
            if full is not None and "." in name:
                if isinstance(resolve(full), types.ModuleType):
                    contexts = [full]
                else:
                    contexts = [full.rsplit(".", 1)[0], _canonical(full).rsplit(".", 1)[0]]
    return out


def test_api_table_parses_into_names():
    names = [n for n, _ in table_names(README.read_text())]
    assert len(api_table(README.read_text())) >= 20
    assert "transformer_jax.ops.attention.attention" in names and "causal_mask" in names and "RopeScaling" in names
    assert "graphdef" not in names and "..." not in names


@pytest.mark.parametrize(("name", "full"), table_names(README.read_text()), ids=lambda v: v)
def test_api_table_name_resolves(name, full):
    assert _resolves(full), f"README's API table names `{name}`, and {full} does not import"


# docs/api/*.md directives -------------------------------------------------------------------------


@functools.cache
def directives() -> dict[str, bool]:
    """``{identifier: renders its members}`` of every ``::: identifier`` in docs/api/*.md (``members:
    false`` in its options renders the object alone)."""
    out = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("::: "):
                options = []
                for following in lines[i + 1 :]:
                    if not following.startswith("    "):
                        break
                    options.append(following.strip())
                out[line[4:].strip()] = "members: false" not in options
    return out


def _defined_in(module: types.ModuleType, name: str) -> bool:
    """Whether ``name`` is defined in ``module`` itself, not imported into it: mkdocstrings renders
    a module's own public members, and imported ones only when ``__all__`` lists them."""
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__ == module.__name__
    if isinstance(obj, types.ModuleType):
        return False  # a submodule is rendered by its own directive
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            if any(isinstance(t, ast.Name) and t.id == name for t in elements):
                return True
    return False


def rendered_by(full: str) -> str | None:
    """The directive that renders ``full`` under this path or where it is defined: its own, or its
    module's (a member the module defines or lists in ``__all__``)."""
    if not _resolves(full):
        return None
    return _rendered_at(full) or _rendered_at(_canonical(full))


def _rendered_at(full: str) -> str | None:
    found = directives()
    if full in found:
        return full
    parent, name = full.rsplit(".", 1)
    if not found.get(parent) or name.startswith("_"):
        return None
    module = resolve(parent)
    if not isinstance(module, types.ModuleType):
        return None
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return parent if name in exported else None
    return parent if _defined_in(module, name) else None


@pytest.mark.parametrize(("name", "full"), table_names(README.read_text()), ids=lambda v: v)
def test_api_table_name_has_an_api_page(name, full):
    where = _canonical(full) if _resolves(full) else full
    assert rendered_by(full), (
        f"README's API table names `{name}` ({full}), and no `::: ...` directive in docs/api/*.md renders it: "
        f"add `::: {where.rsplit('.', 1)[0]}` (its module) or `::: {where}` to an API page"
    )


def test_directives_name_objects_that_exist():
    missing = [d for d in directives() if not _resolves(d)]
    assert not missing, f"docs/api/*.md directives for names that do not import: {missing}"


def test_rendered_by_reads_modules_as_mkdocstrings_does():
    assert rendered_by("transformer_jax.ops.masks.causal_mask") == "transformer_jax.ops.masks"  # defined there
    assert rendered_by("transformer_jax.models.DecoderLM") == "transformer_jax.models"  # in __all__
    assert rendered_by("transformer_jax.ops.rope.Registry") is None  # imported, no __all__: not rendered
    assert rendered_by("transformer_jax.ops.attention") == "transformer_jax.ops.attention"
    assert rendered_by("transformer_jax.ops.masks.nothing_here") is None


# README.md: short, and its links lead somewhere ---------------------------------------------------


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move sections into docs/ (issue 42 keeps it under 250)"


def _slug(heading: str) -> str:
    """The anchor of a Markdown heading, as GitHub and mkdocs' toc make it for ASCII headings."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_readme_links_lead_to_files_and_headings():
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in relative)
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else README
        assert target.exists(), f"README.md links {link}, and {path} does not exist"
        if anchor:
            assert anchor in _anchors(target), f"README.md links {link}, and {path} has no heading #{anchor}"
