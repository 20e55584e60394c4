"""Fine-grained FP8 checkpoints (``quantization_config.quant_method="fp8"``: DeepSeek-V3 / R1,
Qwen3 ...-FP8), dequantized on load.

Such a checkpoint stores a linear weight W [out, in] as float8 e4m3 values Q and one float32
scale per ``weight_block_size`` = [b_out, b_in] block, ``<name>_scale_inv`` [ceil(out / b_out),
ceil(in / b_in)] (the blocks at the edges may be partial). The weight is

    W[i, j] = Q[i, j] * scale_inv[i // b_out, j // b_in]

(transformers' ``FineGrainedFP8`` with ``dequantize=True``). Other tensors (embeddings, norms,
routers) are stored unquantized and read as they are. The model then computes in the requested
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

from transformer_jax.models.hf.safetensors_io import CheckpointReader

SCALE_SUFFIX = "_scale_inv"
_FP8 = (np.dtype(ml_dtypes.float8_e4m3fn),)
_KNOWN = {"quant_method", "fmt", "weight_block_size", "activation_scheme", "modules_to_not_convert"}


def fp8_block(hf: Mapping[str, Any]) -> tuple[int, int] | None:
    """``weight_block_size`` of a config.json's FP8 ``quantization_config`` (None without one); any
    other quantization, format or key is an error naming it."""
    q = hf.get("quantization_config")
    if q is None:
        return None
    where = f"config.json quantization_config={q!r}"
    if not isinstance(q, Mapping) or q.get("quant_method") != "fp8":
        raise ValueError(f"{where} is not supported: only fine-grained FP8 (quant_method 'fp8') is dequantized")
    if (unknown := sorted(set(q) - _KNOWN)) or q.get("fmt", "e4m3") != "e4m3":
        raise ValueError(f"{where} is not supported: keys {unknown} / fmt {q.get('fmt')!r} (known: e4m3 and {_KNOWN})")
    if q.get("activation_scheme", "dynamic") != "dynamic":
        raise ValueError(f"{where} is not supported: static activation scales have no place in a dequantized model")
    block = q.get("weight_block_size")
    if not (isinstance(block, list | tuple) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"{where} is not supported: weight_block_size must be [rows, columns] (DeepSeek: [128, 128])")
    return int(block[0]), int(block[1])


def dequantize(q_RC: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """``Q * scale_inv`` per block, float32 [R, C], in place of a float32 copy of ``q_RC``."""
    (R, C), (br, bc) = q_RC.shape, block
    if scale_inv.shape != (math.ceil(R / br), math.ceil(C / bc)):
        raise ValueError(
            f"scale_inv of shape {scale_inv.shape} does not tile a weight of {(R, C)} in blocks of {block}: "
            f"expected {(math.ceil(R / br), math.ceil(C / bc))}"
        )
    w = q_RC if q_RC.dtype == np.float32 else q_RC.astype(np.float32)
    columns = np.repeat(scale_inv.astype(np.float32), bc, axis=1)[:, :C]
    for i in range(scale_inv.shape[0]):
        w[i * br : (i + 1) * br] *= columns[i]
    return w


class Fp8CheckpointReader(CheckpointReader):
    """A `CheckpointReader` that returns each FP8 weight dequantized (`dequantize`) and hides its
    ``_scale_inv`` tensor; an FP8 tensor without one, or not 2-D, is an error naming it."""

    def __init__(self, directory: str | os.PathLike, block: tuple[int, int]):
        super().__init__(directory)
        self.block = block

    def names(self) -> set[str]:
        return {n for n in self.tensors if not (n.endswith(SCALE_SUFFIX) and n[: -len(SCALE_SUFFIX)] in self.tensors)}

    def read(self, name: str, dtype=None) -> np.ndarray:
        info = self.tensors.get(name)
        if info is None or info.dtype not in _FP8:
            return super().read(name, dtype)
        scale = name + SCALE_SUFFIX
        if scale not in self.tensors or len(info.shape) != 2:
            raise ValueError(
                f"tensor {name!r} at {self.directory} is FP8 but has no 2-D block scales {scale!r}: it cannot be "
                "dequantized"
            )
        w = dequantize(super().read(name, np.float32), super().read(scale, np.float32), self.block)
        return w if dtype is None or np.dtype(dtype) == w.dtype else w.astype(dtype)
