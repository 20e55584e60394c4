"""``model.init.scheme="xavier"`` against the papers' formulas, from the empirical std of the kernels.

DeepNet (Wang et al. 2022, Figure 2), decoder-only with M layers: alpha = (2M)^(1/4) on the
residual, beta = (8M)^(-1/4) the Xavier gain of the value, output and FFN projections; q and k
keep gain 1; no other depth factor. Xavier (Glorot & Bengio 2010): Var = gain^2 * 2 / (fan_in +
fan_out); the code draws it uniform on +-sqrt(3 Var). The standard error of a sample std over n
uniform entries is about 0.45 std / sqrt(n): every check allows 5 of them.
"""

import math
from typing import Any

import numpy as np
import pytest

from transformer_jax.models import ModelConfig, ModelDims, build_model
from transformer_jax.nn.init import InitConfig

D, H, F = 64, 4, 256


def kernels(placement: str, n_layers: int, init: str = "xavier") -> tuple[dict[str, np.ndarray], float, float]:
    """Every layer's kernels pooled by name, and the blocks' (alpha, beta)."""
    cfg = ModelConfig(
        dims=ModelDims(vocab_size=16, d_model=D, n_heads=H, d_ff=F, n_layers=n_layers, max_len=8),
        placement=placement,
        init=InitConfig(scheme=init),
    )
    model: Any = build_model(cfg, seed=0)
    blocks = list(model.layers.layers)
    pick = {
        "q": lambda b: b.self_attn.q,
        "k": lambda b: b.self_attn.k,
        "v": lambda b: b.self_attn.v,
        "o": lambda b: b.self_attn.o,
        "ffn_in": lambda b: b.ffn.w_in,
        "ffn_out": lambda b: b.ffn.w_out,
    }
    pooled = {n: np.concatenate([np.asarray(f(b).kernel[...]).ravel() for b in blocks]) for n, f in pick.items()}
    return pooled, blocks[0].cfg.residual.alpha, blocks[0].cfg.residual.beta


FANS = {"q": (D, D), "k": (D, D), "v": (D, D), "o": (D, D), "ffn_in": (D, F), "ffn_out": (F, D)}


def assert_xavier(w: np.ndarray, fans: tuple[int, int], gain: float) -> None:
    want = gain * math.sqrt(2.0 / sum(fans))
    assert np.std(w) == pytest.approx(want, rel=5 * 0.45 / math.sqrt(w.size))
    assert abs(np.mean(w)) < 5 * want / math.sqrt(w.size)
    assert np.max(np.abs(w)) <= math.sqrt(3) * want * (1 + 1e-6)  # uniform on +-sqrt(3) std


@pytest.mark.parametrize("m", [2, 12])
def test_deepnorm_is_xavier_times_beta_on_v_o_ffn_and_gain_one_on_q_k(m):
    w, alpha, beta = kernels("deepnorm", m)
    assert alpha == pytest.approx((2 * m) ** 0.25) and beta == pytest.approx((8 * m) ** -0.25)
    for name, fans in FANS.items():
        assert_xavier(w[name], fans, 1.0 if name in ("q", "k") else (8 * m) ** -0.25)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_xavier_has_no_depth_factor(placement):
    """Post-LN and Pre-LN with init="xavier": gain 1 everywhere, the same at 2 and 12 layers (no
    GPT-2 1/sqrt(2L) on the output projections), and alpha = beta = 1."""
    for m in (2, 12):
        w, alpha, beta = kernels(placement, m)
        assert (alpha, beta) == (1.0, 1.0)
        for name, fans in FANS.items():
            assert_xavier(w[name], fans, 1.0)


def test_normal_init_keeps_gpt2s_depth_factor_on_output_projections():
    """The contrast: init="normal" (std 0.02) divides the residual output projections by sqrt(2L)."""
    w, _, _ = kernels("pre", 6, init="normal")
    assert np.std(w["q"]) == pytest.approx(0.02, rel=0.02)
    for name in ("o", "ffn_out"):
        assert np.std(w[name]) == pytest.approx(0.02 / math.sqrt(12), rel=0.02)
