"""``prepare``'s tokenizing workers: each tokenizes a shard's documents and writes its records.

``init_worker`` sets a process up (tokenizer, dtype, record size); ``write_shard`` runs in it (or in
the main process with ``--workers 1``); ``run_pool`` keeps ``workers`` spawned processes busy with at
most two shards each in flight and reports finished shards in (split, index) order of completion.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from transformer_jax.data import documents as docs_io
from transformer_jax.data import shards
from transformer_jax.data.tokenizers import Tokenizer, tokenizer_from_json

if TYPE_CHECKING:
    from transformer_jax.data.prepare import Task

_WORKER: dict[str, Any] = {}


def init_worker(tokenizer_json: str, dtype: str, record_bytes: float) -> None:
    _WORKER["tokenizer"] = tokenizer_from_json(json.loads(tokenizer_json))
    _WORKER["dtype"] = np.dtype(dtype)
    _WORKER["record_bytes"] = record_bytes


def write_shard(docs: list[str], path: str) -> dict[str, Any]:
    """Tokenize ``docs`` and write them to the shard ``path`` (in a worker); returns its counts."""
    tok: Tokenizer = _WORKER["tokenizer"]
    dtype: np.dtype = _WORKER["dtype"]
    arrays = [tok.encode_np(doc) for doc in docs]
    per_record = shards.documents_per_record([len(a) for a in arrays], dtype.itemsize, _WORKER["record_bytes"])
    records = shards.write_records(path, arrays, dtype, per_record)
    unk = tok.unk_id
    return {
        "documents": len(arrays),
        "records": records,
        "documents_per_record": per_record,
        "tokens": int(sum(len(a) for a in arrays)),
        "unk_tokens": int(sum(int((a == unk).sum()) for a in arrays)) if unk >= 0 else 0,
        "bytes": os.path.getsize(path),
        "sha256": docs_io.sha256_file(Path(path)),
    }


def run_pool(
    workers: int,
    init: tuple[str, str, float],
    tasks: Iterator[Task],
    out: Path,
    finished: Callable[[Task, dict[str, Any]], None],
) -> None:
    """Tokenize ``tasks`` in ``workers`` spawned processes, at most two shards each in flight."""
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_worker, initargs=init)
    inflight: dict[Future, Task] = {}

    def collect(return_when) -> None:
        done, _ = wait(inflight, return_when=return_when)
        errors = []
        for future in sorted(done, key=lambda f: (inflight[f].split, inflight[f].index)):
            task, error = inflight.pop(future), future.exception()
            if error is None:
                finished(task, future.result())
            else:
                errors.append(error)
        if errors:
            raise errors[0]

    try:
        for task in tasks:
            if len(inflight) >= 2 * workers:
                collect(FIRST_COMPLETED)
            inflight[pool.submit(write_shard, task.docs, str(out / (task.file + ".tmp")))] = task
        while inflight:
            collect(FIRST_COMPLETED)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 1)))
