"""``save_pretrained``: a DecoderLM -> a Hugging Face model directory (config.json, safetensors,
optionally the tokenizer), loadable by ``transformers`` and by ``from_pretrained``.

Tensors are converted and written one link at a time (a first pass only computes the shapes for
the header), so host memory holds one converted tensor group beyond the model itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from flax import nnx

from transformer_jax.core.configlib import check_choice
from transformer_jax.core.dtypes import DTYPES
from transformer_jax.models.hf.configs import config_to_hf
from transformer_jax.models.hf.load import CONFIG_FILE, _path, check_coverage
from transformer_jax.models.hf.safetensors_io import INDEX_FILE, SINGLE_FILE, write_safetensors
from transformer_jax.models.hf.scanned import host_getter, layer_slots, per_layer_shapes
from transformer_jax.models.hf.spec import Link


@runtime_checkable
class PretrainedTokenizer(Protocol):
    """A tokenizer that writes Hugging Face files (``data.hf_tokenizer.HFTokenizer``)."""

    def save_pretrained(self, directory: str | os.PathLike) -> Any: ...


def _shard_name(i: int, n: int) -> str:
    return SINGLE_FILE if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def _remove_stale(directory: Path) -> None:
    for old in [directory / INDEX_FILE, directory / SINGLE_FILE, *directory.glob("model-*-of-*.safetensors")]:
        old.unlink(missing_ok=True)


def save_pretrained(
    model: nnx.Module,
    path: str | os.PathLike,
    *,
    tokenizer: PretrainedTokenizer | None = None,
    family: str | None = None,
    dtype: str | None = None,
    max_shard_bytes: int = 5 * 2**30,
) -> Path:
    """Writes ``model`` (a DecoderLM, per-layer or with a scanned stack) to the directory ``path`` in
    Hugging Face layout and returns it.

    ``family``: the ``model_type`` to write (default: the first family that expresses the config
    exactly; a config none expresses is an error naming the fields). ``dtype``: cast the tensors
    (default: as stored). Files above ``max_shard_bytes`` are split into shards with an index.
    ``tokenizer``: also write its ``tokenizer.json`` / ``tokenizer_config.json``.
    """
    cfg = model.cfg  # type: ignore[attr-defined]
    if tokenizer is not None and not isinstance(tokenizer, PretrainedTokenizer):
        raise TypeError(
            f"tokenizer={type(tokenizer).__name__} cannot write Hugging Face files; only a tokenizer with "
            "save_pretrained (transformer_jax.data.hf_tokenizer.HFTokenizer) can"
        )
    if cfg.mtp is not None:  # no family here stores MTP layers (DeepSeek-V3's would map them)
        cfg = dataclasses.replace(cfg, mtp=None)
        warnings.warn(mtp_dropped_message(model), UserWarning, stacklevel=2)
    fam, hf_config = config_to_hf(cfg, family)
    cast = None
    if dtype is not None:
        check_choice("dtype", dtype, DTYPES)
        cast, hf_config["dtype"] = np.dtype(DTYPES.get(dtype)), dtype
    flat = {_path(p): v for p, v in nnx.to_flat_state(nnx.state(model)) if p[0] != "mtp"}
    slots = layer_slots(flat, cfg.dims.n_layers)
    links = fam.links(cfg, None)
    check_coverage(fam, links, {n for link in links for n in link.hf}, per_layer_shapes(flat, slots))
    get = host_getter(flat, slots)

    def tensors(link: Link) -> tuple[np.ndarray, ...]:
        ours = [get(p) for p in link.ours]
        return tuple(
            np.ascontiguousarray(a) for a in link.to_hf(*(a if cast is None else a.astype(cast) for a in ours))
        )

    shards: list[list[tuple[Link, list]]] = [[]]
    size = total = 0
    for link in links:
        entries = [(n, a.dtype, a.shape) for n, a in zip(link.hf, tensors(link))]
        nbytes = sum(int(np.prod(s)) * d.itemsize for _, d, s in entries)
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((link, entries))
        size += nbytes
        total += nbytes

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale(out)
    weight_map = {}
    for i, shard in enumerate(shards):
        name = _shard_name(i, len(shards))
        entries = [e for _, es in shard for e in es]
        write_safetensors(out / name, entries, (a for link, _ in shard for a in tensors(link)))
        weight_map.update({n: name for n, _, _ in entries})
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2))
    (out / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2, sort_keys=True))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def mtp_dropped_message(model: nnx.Module) -> str:
    """What an export leaves out of a model with multi-token prediction modules, by name."""
    mtp = [(p, v) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param)) if p[0] == "mtp"]
    names = sorted({_path(p[:3]) for p, _ in mtp})
    n = sum(int(np.prod(v.shape)) for _, v in mtp)
    return (
        f"model.mtp: the multi-token prediction modules {', '.join(names)} ({n:,} parameters) have no place in "
        "this Hugging Face family and are dropped from the export; the main model's next-token predictions "
        "are unchanged, speculative decoding from the export is not possible"
    )
