"""Fine-grained FP8 checkpoints (DeepSeek-V3's format) dequantized on load: a tiny transformers
model's linear weights quantized here to float8 e4m3 in ragged blocks, loaded, give exactly the
parameters (and logits) of the same checkpoint with each weight replaced by Q x scale written out
block by block in float32; what cannot be dequantized is an error naming it. Needs the ``interop``
extra."""

from __future__ import annotations

import math

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.models.test_hf_checkpoints import _rewrite, _tensors  # noqa: E402
from tests.models.test_hf_families import hf_model, tokens  # noqa: E402
from transformer_jax.models.hf import from_pretrained  # noqa: E402
from transformer_jax.models.hf.fp8 import dequantize  # noqa: E402

pytestmark = pytest.mark.interop

BLOCK = (24, 40)  # ragged against 64 / 96 / 128-wide weights; DeepSeek's is 128 x 128
QUANT = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(BLOCK)}


def _quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Q float8, scale_inv float32, Q x scale float32) of a 2-D weight, block by block, with a
    scale of max|w| / 448 (e4m3's largest value) per block, as DeepSeek's converter does."""
    R, C = w.shape
    scales = np.zeros((math.ceil(R / BLOCK[0]), math.ceil(C / BLOCK[1])), np.float32)
    q = np.zeros((R, C), ml_dtypes.float8_e4m3fn)
    ref = np.zeros((R, C), np.float32)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            rows, cols = slice(i * BLOCK[0], (i + 1) * BLOCK[0]), slice(j * BLOCK[1], (j + 1) * BLOCK[1])
            scales[i, j] = np.abs(w[rows, cols]).max() / 448.0
            q[rows, cols] = (w[rows, cols] / scales[i, j]).astype(ml_dtypes.float8_e4m3fn)
            ref[rows, cols] = q[rows, cols].astype(np.float32) * scales[i, j]
    return q, scales, ref


def _quantizable(name: str, t: np.ndarray) -> bool:
    return t.ndim == 2 and name.endswith("proj.weight")


@pytest.fixture(scope="module", params=["llama", "deepseek_v3"])
def checkpoints(request, tmp_path_factory):
    """(fp8 dir, reference dir): the fp8 one with Q, scale_inv and quantization_config; the
    reference with Q x scale in float32 and no quantization_config."""
    base = tmp_path_factory.mktemp(request.param)
    hf_model(request.param).save_pretrained(base / "src")
    fp8, ref = {}, {}
    for name, t in _tensors(base / "src").items():
        if _quantizable(name, t):
            q, s, r = _quantize(t.astype(np.float32))
            fp8 |= {name: q, name + "_scale_inv": s}
            ref[name] = r
        else:
            fp8[name] = ref[name] = t
    assert any(v.dtype == ml_dtypes.float8_e4m3fn for v in fp8.values())
    return _rewrite(base / "src", base / "fp8", fp8, quantization_config=QUANT), _rewrite(
        base / "src", base / "ref", ref
    )


def test_an_fp8_checkpoint_loads_as_its_dequantized_weights(checkpoints):
    from flax import nnx

    (_, fp8), (_, ref) = from_pretrained(checkpoints[0]), from_pretrained(checkpoints[1])
    a, b = nnx.to_flat_state(nnx.state(fp8)), nnx.to_flat_state(nnx.state(ref))
    for (path, x), (_, y) in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x[...]), np.asarray(y[...]), err_msg=str(path))
    x = tokens((2, 16))
    np.testing.assert_array_equal(np.asarray(fp8(x)[0]), np.asarray(ref(x)[0]))


def test_it_loads_into_bfloat16_and_under_the_config_transformers_writes(checkpoints, tmp_path):
    """Dequantized in float32, then rounded once to bfloat16: the reference's float32 weights
    rounded (the routing bias stays float32 in both). transformers' own FineGrainedFP8Config (every
    key it saves) is read the same."""
    from flax import nnx

    written = transformers.FineGrainedFP8Config(weight_block_size=BLOCK, modules_to_not_convert=["lm_head"]).to_dict()
    path = _rewrite(checkpoints[0], tmp_path / "m", quantization_config=written)
    (_, fp8), (_, ref) = from_pretrained(path, dtype="bfloat16"), from_pretrained(checkpoints[1], dtype="bfloat16")
    assert fp8.embed.embedding[...].dtype == jnp.bfloat16
    for (p, x), (_, y) in zip(nnx.to_flat_state(nnx.state(fp8)), nnx.to_flat_state(nnx.state(ref)), strict=True):
        assert x[...].dtype == y[...].dtype, p
        np.testing.assert_array_equal(np.asarray(x[...], np.float32), np.asarray(y[...], np.float32), err_msg=str(p))


def test_dequantize_tiles_partial_edge_blocks():
    q = np.arange(35, dtype=np.float32).reshape(5, 7)
    s = np.array([[1.0, 10.0, 100.0], [2.0, 20.0, 200.0], [3.0, 30.0, 300.0]], np.float32)
    out = np.zeros((5, 7), np.float32)
    want = q * np.array(
        [[1, 1, 1, 10, 10, 10, 100]] * 2 + [[2, 2, 2, 20, 20, 20, 200]] * 2 + [[3] * 3 + [30] * 3 + [300]]
    )
    np.testing.assert_array_equal(dequantize(q, s, (2, 3), out), want)
    with pytest.raises(ValueError, match=r"do not tile a weight of \(5, 7\) in blocks of \(2, 4\)"):
        dequantize(q, s, (2, 4), out)


@pytest.mark.parametrize(
    ("quant", "message"),
    [
        ({"quant_method": "bitsandbytes"}, "only fine-grained FP8"),
        ({**QUANT, "fmt": "e5m2"}, "fmt='e5m2' (supported: e4m3)"),
        ({**QUANT, "activation_scheme": "static"}, "activation_scheme='static' (supported: dynamic)"),
        ({**QUANT, "expert_dtype": "fp4"}, "expert_dtype='fp4' (supported: fp8)"),
        ({**QUANT, "weight_block_size": [128]}, "weight_block_size must be [rows, columns]"),
        ({**QUANT, "group_size": 64}, "key(s) ['group_size'] unknown here"),
    ],
)
def test_other_quantizations_are_refused_by_name(checkpoints, tmp_path, quant, message):
    with pytest.raises(ValueError, match="quantization_config=") as err:
        from_pretrained(_rewrite(checkpoints[0], tmp_path / "m", quantization_config=quant))
    assert message in str(err.value)


def test_scales_beside_a_weight_not_in_fp8_are_refused_by_name(checkpoints, tmp_path):
    """A half-converted checkpoint: one weight cast back to float32 with its scales left beside it."""
    tensors = _tensors(checkpoints[0])
    name = next(n for n in tensors if n.endswith("_scale_inv")).removesuffix("_scale_inv")
    tensors[name] = tensors[name].astype(np.float32)
    with pytest.raises(ValueError, match=f"{name}_scale_inv' .* scales '{name}', which is stored as float32"):
        from_pretrained(_rewrite(checkpoints[0], tmp_path / "m", tensors))


def test_an_fp8_weight_without_its_scales_is_refused_by_name(checkpoints, tmp_path):
    tensors = _tensors(checkpoints[0])
    name = next(n for n in tensors if n.endswith("_scale_inv"))
    del tensors[name]
    with pytest.raises(ValueError, match=f"{name.removesuffix('_scale_inv')!r} .* is FP8 but has no 2-D block scales"):
        from_pretrained(_rewrite(checkpoints[0], tmp_path / "m", tensors))
