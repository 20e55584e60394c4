"""What a compiled program communicates: the collectives in its HLO text, counted as executed.

`collectives(hlo_text)` finds every all-gather, reduce-scatter, all-reduce, all-to-all and
collective-permute (their async ``-start`` forms included, ``-done`` not counted twice) and
multiplies those inside a ``while`` body (a ``lax.scan`` over layers, gradient accumulation) by
the loop's trip count (``known_trip_count``, or the bound of its ``i < N`` condition). ``bytes``
is the largest array an instruction moves (all-gather: the gathered result; reduce-scatter: the
input before scattering; all-reduce: the buffer).

`collective_seconds` turns them into time at a link bandwidth with the ring algorithm's traffic
per device: (n - 1) / n of the bytes for all-gather, reduce-scatter and all-to-all, twice that
for all-reduce, all of it for a permute (n: devices in the replica group).
"""

from __future__ import annotations

import re
from collections import defaultdict

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "bf16": 2,
    "f16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "s4": 0.5,
    "u4": 0.5,
}
_SHAPE = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9][a-z]*)?)\[([0-9,]*)\]")
_NAME = re.compile(r"(?:ENTRY\s+)?%?([\w.\-]+)")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_CALLS = re.compile(r"\b(?:body|calls|to_apply|condition)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_COND = re.compile(r"\bcondition=%?([\w.\-]+)")
_CONST = re.compile(r"^\s*%?([\w.\-]+)\s*=\s*s32\[\]\S*\s+constant\((-?\d+)\)")
_LT = re.compile(r"ROOT .*compare\(%?([\w.\-]+), %?([\w.\-]+)\).*direction=LT")
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\][^{]*\{([^}]*)\}")
_GROUPS_LIST = re.compile(r"replica_groups=\{\{([0-9,]*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")


def _array_bytes(text: str) -> float:
    best = 0.0
    for dtype, dims in _SHAPE.findall(text):
        size = _BYTES.get(dtype, 1 if dtype.startswith("f8") else 0)
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        best = max(best, size * n)
    return best


def _group_size(line: str, n_devices: int) -> int:
    mesh = _GROUPS_MESH.search(line)
    if mesh:  # replica_groups=mesh['axis_0'=2,'axis_1'=2], device_ids=(...) {'axis_0'}
        sizes = {k: int(v) for k, v in re.findall(r"'([^']+)'=(\d+)", mesh[1])}
        n = 1
        for axis in re.findall(r"'([^']+)'", mesh[2]):
            n *= sizes.get(axis, 1)
        return n
    listed = _GROUPS_LIST.search(line)
    if listed:
        return max(1, len([x for x in listed[1].split(",") if x]))
    iota = _GROUPS_IOTA.search(line)
    return int(iota[2]) if iota else n_devices


def _computations(hlo: str) -> tuple[dict[str, list[str]], str]:
    comps: dict[str, list[str]] = {}
    entry, current = "", None
    for line in hlo.splitlines():
        header = line[:1] not in ("", " ", "\t") and line.rstrip().endswith("{") and not line.startswith("HloModule")
        if header:
            current = _NAME.match(line)[1]  # pyright: ignore[reportOptionalSubscript]
            comps[current] = []
            entry = current if line.startswith("ENTRY") else entry
        elif current is not None and line.strip() != "}":
            comps[current].append(line)
    return comps, entry


def _trip_count(line: str, comps: dict[str, list[str]]) -> int | None:
    """A while loop's trip count: its ``known_trip_count``, else the bound of a condition that is
    ``i < constant`` (a counted loop from 0, how ``lax.scan`` and ``fori_loop`` lower)."""
    known = _TRIP.search(line)
    if known:
        return int(known[1])
    cond = _COND.search(line)
    body = comps.get(cond[1], []) if cond else []
    consts = {m[1]: int(m[2]) for m in map(_CONST.match, body) if m}
    for row in body:
        lt = _LT.search(row)
        if lt and lt[2] in consts:
            return consts[lt[2]]
    return None


def collectives(hlo: str, n_devices: int) -> list[dict]:
    """One entry per collective instruction: ``kind``, ``bytes``, ``group`` (devices), ``count``
    (executions per run of the program)."""
    comps, entry = _computations(hlo)
    times: dict[str, int] = defaultdict(int)

    def visit(name: str, mult: int, depth: int = 0) -> None:
        if name not in comps or depth > 64:
            return
        times[name] += mult
        for line in comps[name]:
            body = _BODY.search(line)
            trip = _trip_count(line, comps) if body else None
            callees = _CALLS.findall(line) + [c for b in _BRANCHES.findall(line) for c in re.findall(r"[\w.\-]+", b)]
            for callee in callees:
                loop = trip is not None and body is not None and callee == body[1]
                visit(callee, mult * (trip or 1) if loop else mult, depth + 1)

    visit(entry, 1)
    found = []
    for name, mult in times.items():
        for line in comps[name]:
            m = _INSTR.match(line)
            if not m:
                continue
            op = m[2].removesuffix("-start")
            if op in KINDS:
                found.append(
                    {
                        "kind": op,
                        "bytes": _array_bytes(m[1] + " " + m[3]),
                        "group": _group_size(line, n_devices),
                        "count": mult,
                    }
                )
    return found


def summarize(found: list[dict]) -> dict[str, dict[str, float]]:
    """Per kind: executions (``count``) and bytes moved in all of them (``bytes``)."""
    out = {k: {"count": 0, "bytes": 0.0} for k in KINDS}
    for c in found:
        out[c["kind"]]["count"] += c["count"]
        out[c["kind"]]["bytes"] += c["bytes"] * c["count"]
    return out


def collective_seconds(found: list[dict], bytes_per_s: float) -> float:
    """Ring-algorithm time of all the collectives at ``bytes_per_s`` per device."""
    total = 0.0
    for c in found:
        n = c["group"]
        share = 1.0 if c["kind"] == "collective-permute" else (n - 1) / n if n > 1 else 0.0
        total += c["count"] * c["bytes"] * share * (2.0 if c["kind"] == "all-reduce" else 1.0)
    return total / bytes_per_s
