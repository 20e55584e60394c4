"""Per-layer names over a scanned stack (``scan_layers=True``), so the per-layer Hugging Face
mapping loads into and saves from it.

A scanned stack keeps one variable per kind of layer weight with a leading ``layers`` axis
(``layers.layers.self_attn.q.kernel`` [L, D, H, Dh]); the mapping names per-layer variables
(``layers.layers.3.self_attn.q.kernel`` [D, H, Dh]). `layer_slots` relates the two; `LayerStacks`
fills the stacked host arrays layer by layer and hands each over once its last layer is in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from transformer_jax.models.hf.safetensors_io import aligned_empty

STACK = "layers.layers."
LAYERS_AXIS = "layers"


def layer_slots(flat: Mapping[str, Any], n_layers: int) -> dict[str, tuple[str, int]]:
    """``{per-layer name: (scanned name, layer index)}`` for every variable of a scanned stack in
    ``flat`` (``{dotted name: variable}``); empty for a per-layer model. A stacked variable whose
    leading axis is not the ``layers`` axis of length ``n_layers`` (e.g. groups of layers scanned
    together) is an error naming it."""
    slots: dict[str, tuple[str, int]] = {}
    for name, var in flat.items():
        rest = name.removeprefix(STACK)
        if rest == name or rest.split(".", 1)[0].isdigit():
            continue
        axes = (var.get_metadata().get("logical_axes") or ()) if hasattr(var, "get_metadata") else ()
        if not axes or axes[0] != LAYERS_AXIS or var.shape[0] != n_layers:
            raise ValueError(
                f"{name} {tuple(var.shape)} (axes {axes}) is not one {LAYERS_AXIS!r}-stacked weight of "
                f"{n_layers} layers: Hugging Face conversion supports per-layer models and uniform scanned stacks"
            )
        slots.update({f"{STACK}{i}.{rest}": (name, i) for i in range(n_layers)})
    return slots


def per_layer_shapes(flat: Mapping[str, Any], slots: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """``flat`` with each scanned variable replaced by its per-layer shapes (what the mapping fills)."""
    scanned = {key for key, _ in slots.values()}
    view: dict[str, Any] = {k: v for k, v in flat.items() if k not in scanned}
    for name, (key, _) in slots.items():
        view[name] = jax.ShapeDtypeStruct(tuple(flat[key].shape[1:]), flat[key].dtype)
    return view


class LayerStacks:
    """Host buffers of the scanned variables, filled one layer at a time."""

    def __init__(self, flat: Mapping[str, Any], slots: Mapping[str, tuple[str, int]]):
        self.flat, self.slots = flat, slots
        self.buffers: dict[str, np.ndarray] = {}
        self.missing: dict[str, set[int]] = {}

    def put(self, name: str, array: np.ndarray) -> tuple[str, np.ndarray] | None:
        """Stores layer ``name``'s array; ``(scanned name, stacked array)`` once every layer is in."""
        key, i = self.slots[name]
        if key not in self.buffers:
            var = self.flat[key]
            self.buffers[key] = aligned_empty(tuple(var.shape), np.dtype(var.dtype))
            self.missing[key] = set(range(var.shape[0]))
        self.buffers[key][i] = array
        self.missing[key].discard(i)
        if self.missing[key]:
            return None
        del self.missing[key]
        return key, self.buffers.pop(key)


def host_getter(flat: Mapping[str, Any], slots: Mapping[str, tuple[str, int]]):
    """``get(name) -> numpy array`` of a per-layer or scanned model's variable by its per-layer
    name; a scanned variable is fetched to the host once and sliced per layer."""
    cache: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        if name not in slots:
            return np.asarray(jax.device_get(flat[name][...]))
        key, i = slots[name]
        if key not in cache:
            cache[key] = np.asarray(jax.device_get(flat[key][...]))
        return cache[key][i]

    return get
