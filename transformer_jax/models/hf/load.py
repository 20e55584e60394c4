"""``from_pretrained``: a Hugging Face model directory -> (ModelConfig, DecoderLM), tensor by tensor.

The model is built abstractly (``nnx.eval_shape``: shapes, no memory); each parameter is then
created from its checkpoint tensor(s): read into a fresh 64-byte aligned host buffer (converted to
the parameter dtype chunk by chunk on the way), rearranged to our layout (tiled transposes,
reshapes), and placed, which on CPU adopts the buffer without a copy. A few threads read and
convert ahead of the placement, with the tensors in flight bounded to 1/4 of the loaded parameters, so
host memory holds the parameters once plus that bounded window. With a mesh, each tensor goes
straight to its sharding (``jax.make_array_from_callback`` from the parameter's logical axes and
the rule table), never through one device.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx
from flax.core import spmd
from jax.sharding import Mesh, NamedSharding

from transformer_jax.core.configlib import check_choice
from transformer_jax.core.dtypes import DTYPES
from transformer_jax.core.sharding import Rules, logical_to_spec
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.configs import config_from_hf, family_of
from transformer_jax.models.hf.fp8 import Fp8CheckpointReader, fp8_block
from transformer_jax.models.hf.safetensors_io import CheckpointReader, aligned_empty
from transformer_jax.models.hf.scanned import LayerStacks, layer_slots, per_layer_shapes
from transformer_jax.models.hf.spec import FAMILIES, Family, Link, TensorMismatch
from transformer_jax.models.util import abstract_model

CONFIG_FILE = "config.json"


def read_hf_config(path: str | os.PathLike) -> dict[str, Any]:
    """The config.json of a Hugging Face model directory."""
    file = Path(path) / CONFIG_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist: not a Hugging Face model directory")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None


def _path(parts: tuple) -> str:
    return ".".join(str(p) for p in parts)


def check_tensors(family: Family, links: list[Link], names: set[str]) -> None:
    """Every tensor the mapping needs is in the checkpoint, and every checkpoint tensor is used
    (or is a buffer the family knows to hold nothing)."""
    wanted = [n for link in links for n in link.hf]
    missing = sorted(set(wanted) - names)
    if missing:
        raise ValueError(f"the checkpoint lacks tensor(s) a {family.name} model needs: {_few(missing)}")
    extra = sorted(n for n in names - set(wanted) if not family.derived(n))
    if extra:
        raise ValueError(
            f"checkpoint tensor(s) with no place in a {family.name} DecoderLM: {_few(extra)} (e.g. a vision tower "
            "or another head; such checkpoints are not supported)"
        )


def check_params(family: Family, links: list[Link], params: Mapping[str, Any]) -> None:
    """Every model variable is filled by exactly one link."""
    filled = [p for link in links for p in link.ours]
    twice = sorted({p for p in filled if filled.count(p) > 1})
    unfilled = sorted(set(params) - set(filled))
    unknown = sorted(set(filled) - set(params))
    if twice or unfilled or unknown:
        raise ValueError(
            f"the {family.name} mapping does not match the model: filled twice {twice}, never filled {unfilled}, "
            f"not in the model {unknown}"
        )


def check_coverage(family: Family, links: list[Link], names: set[str], params: Mapping[str, Any]) -> None:
    check_tensors(family, links, names)
    check_params(family, links, params)


def usable_names(family: Family, cfg: ModelConfig, names: set[str]) -> set[str]:
    """``names`` without the tensors the family skips (``Family.skipped``), with a warning naming them."""
    skipped, why = family.skipped(cfg, names)
    if skipped:
        warnings.warn(
            f"{family.name}: {len(skipped)} checkpoint tensor(s) left unread: {_few(sorted(skipped))}; {why}",
            UserWarning,
            stacklevel=3,
        )
    return names - set(skipped)


def _few(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f" (and {len(names) - n} more)" if len(names) > n else "")


def _host_arrays(link: Link, reader: CheckpointReader, dtype: np.dtype) -> tuple[list, tuple | Exception]:
    """(checkpoint shapes, our arrays in ``dtype`` ready to place, or the error converting them)."""
    tensors = [reader.read(n, dtype if link.ours else None) for n in link.hf]
    shapes = [t.shape for t in tensors]
    try:
        return shapes, tuple(_adoptable(a, dtype) for a in link.to_ours(*tensors))
    except TensorMismatch:
        raise
    except ValueError as e:
        return shapes, e


def convert(link: Link, tensors: list[np.ndarray], params: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """``link.to_ours`` with the shapes checked against the model's; a mismatch names both sides."""
    try:
        arrays = link.to_ours(*tensors)
    except TensorMismatch:
        raise
    except ValueError as e:
        arrays = e
    return _checked(link, [t.shape for t in tensors], arrays, params)


def _checked(link: Link, shapes: list, arrays: tuple | Exception, params: Mapping[str, Any]) -> tuple:
    want = [tuple(params[name].shape) for name in link.ours]
    if isinstance(arrays, Exception) or [a.shape for a in arrays] != want:
        got = ", ".join(f"{n} {list(s)}" for n, s in zip(link.hf, shapes))
        raise ValueError(
            f"checkpoint tensor(s) {got} do not fit {', '.join(f'{n} {s}' for n, s in zip(link.ours, want))}: "
            "config.json does not match the tensors"
        )
    return arrays


def _adoptable(array: np.ndarray, dtype) -> np.ndarray:
    """``array`` in ``dtype``, C-contiguous and 64-byte aligned (so placing it on a CPU device
    adopts the buffer instead of copying it); copied only when it is not already."""
    if array.dtype == dtype and array.flags.c_contiguous and array.ctypes.data % 64 == 0:
        return array
    out = aligned_empty(array.shape, dtype)
    out[...] = array
    return out


def _placer(mesh: Mesh | None, rules: Rules | None):
    if mesh is None:
        return lambda array, var: jax.device_put(array)
    rules = rules if rules is not None else spmd.get_logical_axis_rules()
    if not rules:
        raise ValueError(
            "from_pretrained(mesh=...) needs logical-axis rules: pass rules=transformer_jax.parallel.LOGICAL_RULES "
            "(or call it inside transformer_jax.parallel.sharding_context(mesh))"
        )

    def place(array: np.ndarray, var: nnx.Variable) -> jax.Array:
        axes = var.get_metadata().get("logical_axes")
        sharding = NamedSharding(mesh, logical_to_spec(axes, array.shape, dict(mesh.shape), rules))
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    return place


def load_params(
    model_cfg: ModelConfig,
    family: Family,
    reader: CheckpointReader,
    *,
    mesh: Mesh | None = None,
    rules: Rules | None = None,
    workers: int | None = None,
) -> nnx.Module:
    """A DecoderLM of ``model_cfg`` whose every variable comes from the checkpoint ``reader``.

    ``workers`` threads read and convert tensors (file reads and numpy copies release the GIL)
    while this thread builds the abstract model and places the results in order; the tensors in
    flight are bounded to 1/4 of the parameters as loaded (`CheckpointReader.nbytes`; at least one
    link), so host memory stays near the parameters' own size.
    """
    names = usable_names(family, model_cfg, reader.names())
    links = family.links(model_cfg, names)
    check_tensors(family, links, names)
    place = _placer(mesh, rules)
    dtype = np.dtype(model_cfg.params_dtype)
    cost = [2 * sum(reader.nbytes(n, dtype) for n in link.hf) for link in links]
    budget = max(max(cost, default=0), sum(cost) // 4)
    with ThreadPoolExecutor(workers or min(4, os.cpu_count() or 1)) as pool:
        pending: deque = deque()
        queued = inflight = 0

        def refill():
            nonlocal queued, inflight
            while queued < len(links) and (not pending or inflight + cost[queued] <= budget):
                pending.append(pool.submit(_host_arrays, links[queued], reader, dtype))
                inflight += cost[queued]
                queued += 1

        refill()
        graphdef, state = nnx.split(abstract_model(model_cfg))
        flat = {_path(path): var for path, var in nnx.to_flat_state(state)}
        slots = layer_slots(flat, model_cfg.dims.n_layers)
        targets = per_layer_shapes(flat, slots)
        check_params(family, links, targets)
        stacks = LayerStacks(flat, slots)
        for i, link in enumerate(links):
            shapes, arrays = pending.popleft().result()
            inflight -= cost[i]
            refill()
            for name, array in zip(link.ours, _checked(link, shapes, arrays, targets)):
                done = stacks.put(name, array) if name in slots else (name, _adoptable(array, flat[name].dtype))
                if done is not None:
                    key, value = done
                    flat[key] = flat[key].replace(place(value, flat[key]))
            del arrays
    return nnx.merge(graphdef, nnx.from_flat_state([(tuple(_split(k)), v) for k, v in flat.items()]))


def _split(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in path.split(".")]


def from_pretrained(
    path: str | os.PathLike,
    *,
    dtype: str = "float32",
    mesh: Mesh | None = None,
    rules: Rules | None = None,
    **overrides: Any,
) -> tuple[ModelConfig, nnx.Module]:
    """``(ModelConfig, DecoderLM)`` of a Hugging Face model directory (config.json and
    model.safetensors or a sharded model.safetensors.index.json); no torch needed.

    ``dtype``: parameters and compute in this dtype (``float32``, ``bfloat16``, ``float16``), or
    ``"auto"`` for the checkpoint's own (config.json ``dtype``/``torch_dtype``, else float32).
    ``mesh``: place each tensor directly onto this mesh, sharded by its logical axes under
    ``rules`` (default: the rules active in ``transformer_jax.parallel.sharding_context``).
    ``overrides``: ModelConfig fields to set on top of the checkpoint's (``attention_impl``,
    ``max_len``...; ``param_dtype`` to keep parameters in another dtype than the compute).
    A fine-grained FP8 checkpoint (DeepSeek-V3's) is dequantized on the way (`fp8`). Unsupported
    families, config values and tensors are errors naming them.
    """
    hf = read_hf_config(path)
    family = family_of(hf)
    if dtype == "auto":
        dtype = hf.get("dtype") or hf.get("torch_dtype") or "float32"
    check_choice("dtype", dtype, DTYPES)
    model_cfg = config_from_hf(hf, **{"dtype": dtype, "param_dtype": dtype, **overrides})
    block = fp8_block(hf)
    reader = CheckpointReader(path) if block is None else Fp8CheckpointReader(path, block)
    return model_cfg, load_params(model_cfg, family, reader, mesh=mesh, rules=rules)


def load_state_dict(model: nnx.Module, sd: Mapping[str, np.ndarray], family: str) -> None:
    """Copies a ``{name: numpy array}`` state dict of the Hugging Face ``family`` into ``model``
    in place (same coverage checks as `from_pretrained`)."""
    fam = FAMILIES.get(family)
    cfg = model.cfg  # type: ignore[attr-defined]
    flat = {_path(path): var for path, var in nnx.to_flat_state(nnx.state(model))}
    slots = layer_slots(flat, cfg.dims.n_layers)
    targets = per_layer_shapes(flat, slots)
    names = usable_names(fam, cfg, set(sd))
    links = fam.links(cfg, names)
    check_coverage(fam, links, names, targets)
    stacks = LayerStacks(flat, slots)
    for link in links:
        for name, array in zip(link.ours, convert(link, [np.asarray(sd[n]) for n in link.hf], targets)):
            done = stacks.put(name, array) if name in slots else (name, array)
            if done is not None:
                flat[done[0]][...] = jax.numpy.asarray(done[1], flat[done[0]].dtype)
