"""Fine-grained FP8 checkpoints (``quantization_config.quant_method="fp8"``: DeepSeek-V3 / R1,
Qwen3 ...-FP8), dequantized on load.

Such a checkpoint stores a linear weight W [out, in] as float8 e4m3 values Q and one float32
scale per ``weight_block_size`` = [b_out, b_in] block, ``<name>_scale_inv`` [ceil(out / b_out),
ceil(in / b_in)] (the blocks at the edges may be partial). The weight is

    W[i, j] = Q[i, j] * scale_inv[i // b_out, j // b_in]

(transformers' ``FineGrainedFP8`` with ``dequantize=True``; ``scale_fmt="ue8m0"`` scales are powers
of two stored as float32, read the same). Which tensors are FP8 is read from the file itself (their
dtype), so ``modules_to_not_convert`` / ``modules_to_convert`` need not be: embeddings, norms and
routers are stored unquantized and read as they are. The model then computes in the requested
dtype; activations are not quantized (``activation_scheme="dynamic"`` quantizes them only in
FP8 kernels), so logits match the dequantized model's, not an FP8 kernel's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from transformer_jax.models.hf.safetensors_io import CheckpointReader, aligned_empty

SCALE_SUFFIX = "_scale_inv"
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
DEFAULT_BLOCK = (128, 128)  # transformers' FineGrainedFP8Config default
_NEUTRAL = {  # keys that describe the file (which tensors are FP8) or transformers' kernels, not the weights
    "modules_to_not_convert",
    "ignored_layers",
    "modules_to_convert",
    "dequantize",
}
_CHOICES = {
    "fmt": ("e4m3",),
    "activation_scheme": ("dynamic",),
    "scale_fmt": ("float", "ue8m0"),
    "expert_dtype": ("fp8",),
}


def fp8_block(hf: Mapping[str, Any]) -> tuple[int, int] | None:
    """``weight_block_size`` of a config.json's FP8 ``quantization_config`` (None without one; missing:
    128 x 128); another quantization, format, activation scheme or key is an error naming it."""
    q = hf.get("quantization_config")
    if q is None:
        return None
    where = f"config.json quantization_config={q!r} is not supported"
    if not isinstance(q, Mapping) or q.get("quant_method") != "fp8":
        raise ValueError(f"{where}: only fine-grained FP8 (quant_method 'fp8') is read, dequantized")
    unknown = sorted(set(q) - _NEUTRAL - set(_CHOICES) - {"quant_method", "weight_block_size"})
    if unknown:
        raise ValueError(f"{where}: key(s) {unknown} unknown here")
    for key, allowed in _CHOICES.items():
        value = q.get(key, allowed[0])
        if str(value).lower() not in allowed:
            raise ValueError(f"{where}: {key}={value!r} (supported: {', '.join(allowed)})")
    block = q.get("weight_block_size", DEFAULT_BLOCK)
    if not (isinstance(block, list | tuple) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"{where}: weight_block_size must be [rows, columns] (DeepSeek: [128, 128])")
    return int(block[0]), int(block[1])


def dequantize(q_RC: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int], out: np.ndarray) -> np.ndarray:
    """``out[...] = Q * scale_inv`` per block (computed in float32, one row block at a time)."""
    (R, C), (br, bc) = q_RC.shape, block
    if scale_inv.shape != (math.ceil(R / br), math.ceil(C / bc)):
        raise ValueError(
            f"its scales of shape {scale_inv.shape} do not tile a weight of {(R, C)} in blocks of {block}: "
            f"expected {(math.ceil(R / br), math.ceil(C / bc))}"
        )
    columns = np.repeat(scale_inv.astype(np.float32), bc, axis=1)[:, :C]
    for i in range(scale_inv.shape[0]):
        rows = slice(i * br, (i + 1) * br)
        out[rows] = q_RC[rows].astype(np.float32) * columns[i]
    return out


class Fp8CheckpointReader(CheckpointReader):
    """A `CheckpointReader` that returns each e4m3 weight dequantized (`dequantize`) into the
    requested dtype and hides its ``_scale_inv`` tensor; an e4m3 tensor without 2-D scales, or
    scales beside a weight of another dtype, is an error naming it."""

    def __init__(self, directory: str | os.PathLike, block: tuple[int, int]):
        super().__init__(directory)
        self.block = block
        for name in self.tensors:
            base = name.removesuffix(SCALE_SUFFIX)
            if base != name and base in self.tensors and self.tensors[base].dtype != FP8:
                raise ValueError(
                    f"tensor {name!r} at {self.directory} scales {base!r}, which is stored as "
                    f"{self.tensors[base].dtype}, not float8 e4m3: such a checkpoint is half converted"
                )

    def names(self) -> set[str]:
        return {
            n for n in self.tensors if not (n.endswith(SCALE_SUFFIX) and n.removesuffix(SCALE_SUFFIX) in self.tensors)
        }

    def nbytes(self, name: str, dtype: np.dtype) -> int:
        """Bytes ``read(name, dtype)`` holds: an e4m3 weight's float8 values and its result."""
        info = self.tensors[name]
        if info.dtype != FP8:
            return super().nbytes(name, dtype)
        return info.nbytes * (1 + np.dtype(dtype).itemsize)

    def read(self, name: str, dtype=None) -> np.ndarray:
        info = self.tensors.get(name)
        if info is None or info.dtype != FP8:
            return super().read(name, dtype)
        scale = name + SCALE_SUFFIX
        if scale not in self.tensors or len(info.shape) != 2:
            raise ValueError(
                f"tensor {name!r} at {self.directory} is FP8 but has no 2-D block scales {scale!r}: it cannot be "
                "dequantized"
            )
        out = aligned_empty(info.shape, np.float32 if dtype is None else dtype)
        try:
            return dequantize(super().read(name), super().read(scale, np.float32), self.block, out)
        except ValueError as e:
            raise ValueError(f"tensor {name!r} at {self.directory}: {e}") from None
