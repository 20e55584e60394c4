"""Zero-shot multiple-choice tasks from local JSONL files, scored as lm-evaluation-harness 0.4 does.

Each document becomes a context and its choices; every choice is scored as the continuation
``" " + choice`` of the context (the harness' ``target_delimiter``), and

- ``acc``: the choice with the largest summed log-likelihood of its continuation tokens is the gold one;
- ``acc_norm``: the same after dividing each log-likelihood by the choice's length in characters
  (``len(choice)``, without the delimiter: the harness' ``completion_len``);
- ``acc_bytes``: divided by its length in UTF-8 bytes instead (the harness' ``acc_bytes``).

Formats (the Hugging Face datasets' fields, one JSON object per line), as the harness' task yamls:

- ``hellaswag``: ``activity_label, ctx_a, ctx_b, endings, label``; context
  ``preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())``, choices
  ``preprocess(ending)`` (strip, `` [title]`` -> ``". "``, bracketed text removed, double spaces halved).
- ``arc_easy``, ``arc_challenge``: ``question, choices {text, label}, answerKey``; context
  ``"Question: {question}\\nAnswer:"``, gold ``choices.label.index(answerKey)``.
- ``piqa``: ``goal, sol1, sol2, label``; context ``"Question: {goal}\\nAnswer:"``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_jax.core.paths import user_path
from transformer_jax.core.registry import Registry
from transformer_jax.eval.loglikelihood import Scorer, encode_pair

TARGET_DELIMITER = " "


@dataclass(frozen=True)
class Doc:
    context: str
    choices: tuple[str, ...]
    gold: int


class DocError(ValueError):
    """A JSONL line that is not a document of its task's format."""


FORMATS: Registry[Callable[[Mapping[str, Any]], Doc]] = Registry("multiple-choice task")


def _field(doc: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    if name not in doc:
        raise DocError(f"has no field {name!r} (fields: {', '.join(doc) or 'none'})")
    if not isinstance(doc[name], kind):
        raise DocError(f"field {name!r} is {type(doc[name]).__name__}, not {getattr(kind, '__name__', kind)}")
    return doc[name]


def _gold(value: Any, n: int, name: str) -> int:
    try:
        gold = int(value)
    except (TypeError, ValueError):
        raise DocError(f"field {name!r}={value!r} is not an integer") from None
    if not 0 <= gold < n:
        raise DocError(f"field {name!r}={gold} is not the index of one of the {n} choices")
    return gold


def hellaswag_preprocess(text: str) -> str:
    """The harness' cleanup of HellaSwag text (WikiHow's bracket artefacts)."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


@FORMATS.register("hellaswag")
def hellaswag(doc: Mapping[str, Any]) -> Doc:
    ctx = _field(doc, "ctx_a") + " " + _field(doc, "ctx_b").capitalize()
    endings = _field(doc, "endings", list)
    return Doc(
        context=hellaswag_preprocess(_field(doc, "activity_label") + ": " + ctx),
        choices=tuple(hellaswag_preprocess(str(e)) for e in endings),
        gold=_gold(_field(doc, "label", (str, int)), len(endings), "label"),
    )


def arc(doc: Mapping[str, Any]) -> Doc:
    choices = _field(doc, "choices", dict)
    texts, labels = _field(choices, "text", list), _field(choices, "label", list)
    key = _field(doc, "answerKey")
    if key not in labels:
        raise DocError(f"answerKey={key!r} is not one of the choices' labels {labels}")
    return Doc(f"Question: {_field(doc, 'question')}\nAnswer:", tuple(map(str, texts)), labels.index(key))


FORMATS.register("arc_easy", arc)
FORMATS.register("arc_challenge", arc)


@FORMATS.register("piqa")
def piqa(doc: Mapping[str, Any]) -> Doc:
    choices = (_field(doc, "sol1"), _field(doc, "sol2"))
    return Doc(
        f"Question: {_field(doc, 'goal')}\nAnswer:", choices, _gold(_field(doc, "label", (str, int)), 2, "label")
    )


def read_docs(task: str, path: str, limit: int | None = None) -> list[Doc]:
    """The documents of ``path`` in ``task``'s format (the first ``limit``); a bad line is a
    ``ValueError`` naming the file and line."""
    fmt = FORMATS.get(task)
    docs: list[Doc] = []
    with user_path(path, "--tasks").open("r") as f:  # UTF-8; gs:// where the environment provides it
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(docs) >= limit:
                break
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                if not isinstance(raw, dict):
                    raise DocError(f"is a JSON {type(raw).__name__}, not an object")
                docs.append(fmt(raw))
            except (json.JSONDecodeError, DocError) as e:
                raise ValueError(f"{path}:{lineno}: not a {task} document: {e}") from None
    if not docs:
        raise ValueError(f"{path}: no {task} documents (an empty file?)")
    return docs


def score_docs(scorer: Scorer, encode: Callable[[str], list[int]], docs: list[Doc], desc: str) -> list[list[float]]:
    """The log-likelihood of each choice of each document (``" " + choice`` given the context)."""
    requests = [encode_pair(encode, d.context, TARGET_DELIMITER + c) for d in docs for c in d.choices]
    lls = iter(ll for ll, _ in scorer.score(requests, desc=desc))
    return [[next(lls) for _ in d.choices] for d in docs]


def _mean_stderr(hits: np.ndarray) -> tuple[float, float]:
    n = len(hits)
    return float(hits.mean()), float(hits.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")


def metrics(docs: list[Doc], lls: list[list[float]]) -> dict[str, float | int]:
    """``acc``, ``acc_norm``, ``acc_bytes`` (see the module docstring), each with its standard error."""
    out: dict[str, float | int] = {"docs": len(docs)}
    for name, length in (("acc", lambda c: 1.0), ("acc_norm", len), ("acc_bytes", lambda c: len(c.encode()))):
        hits = np.array(
            [
                int(np.argmax(np.asarray(ll) / [float(length(c)) for c in d.choices])) == d.gold
                for d, ll in zip(docs, lls)
            ]
        )
        out[name], out[f"{name}_stderr"] = _mean_stderr(hits.astype(np.float64))
    return out


def evaluate_task(
    scorer: Scorer, encode: Callable[[str], list[int]], task: str, path: str, limit: int | None = None
) -> dict[str, Any]:
    """``metrics`` of ``task`` on the JSONL file ``path``, with the per-document log-likelihoods."""
    docs = read_docs(task, path, limit)
    lls = score_docs(scorer, encode, docs, desc=task)
    return {**metrics(docs, lls), "loglikelihoods": lls, "golds": [d.gold for d in docs]}
