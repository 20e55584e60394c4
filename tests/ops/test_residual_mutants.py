"""Norm placements and DeepNet constants: the edges the main tests leave open (one-layer stacks,
the default alpha, and which argument each error names)."""

from collections.abc import Callable
from typing import cast

import numpy as np
import pytest
from jaxtyping import Array

from transformer_jax.ops.norms import layer_norm
from transformer_jax.ops.residual import PLACEMENTS, deepnorm_constants


def _dn(architecture, n, m, side):
    return deepnorm_constants(architecture=architecture, n_encoder_layers=n, n_decoder_layers=m, side=side)


def test_a_single_layer_is_a_valid_depth():
    """N = M = 1 is the smallest stack: DeepNet's formulas at 1, not an error."""
    assert _dn("decoder_only", 0, 1, "decoder") == pytest.approx((2**0.25, 8**-0.25), rel=1e-12)
    assert _dn("encoder_only", 1, 0, "encoder") == pytest.approx((2**0.25, 8**-0.25), rel=1e-12)
    assert _dn("encoder_decoder", 1, 1, "encoder") == pytest.approx((0.81, 0.87), rel=1e-12)
    assert _dn("encoder_decoder", 1, 1, "decoder") == pytest.approx((3**0.25, 12**-0.25), rel=1e-12)


def test_deepnorm_without_alpha_is_post_ln():
    """apply's alpha defaults to 1, where DeepNorm's Norm(alpha x + F(x)) is post-LN's Norm(x + F(x))."""
    x = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], np.float32)
    w = np.array([[0.5, -1.0, 0.0], [1.0, 0.2, -0.3], [0.0, 0.7, 2.0]], np.float32)
    apply = cast(Callable[..., Array], PLACEMENTS.get("deepnorm").apply)  # the declared type always passes alpha
    out = apply(x, lambda h: h @ w, layer_norm)
    x64 = x.astype(np.float64)
    y = x64 + x64 @ w.astype(np.float64)
    ref = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ("encoder_only", 6, 0, "decoder"),
            "side='decoder' is invalid for architecture='encoder_only'; use side='encoder'",
        ),
        (
            ("decoder_only", 0, 6, "encoder"),
            "side='encoder' is invalid for architecture='decoder_only'; use side='decoder'",
        ),
        (("encoder_only", 0, 6, "encoder"), "n_encoder_layers=0 must be a positive int"),
        (("decoder_only", 6, 0, "decoder"), "n_decoder_layers=0 must be a positive int"),
        (("encoder_decoder", 0, 6, "encoder"), "n_encoder_layers=0 must be a positive int"),
        (("encoder_decoder", 6, 0, "decoder"), "n_decoder_layers=0 must be a positive int"),
    ],
)
def test_errors_start_with_the_offending_argument(args, message):
    """Each error message opens with the argument that is wrong (and for a wrong side, the right one)."""
    with pytest.raises(ValueError) as err:
        _dn(*args)
    assert str(err.value).startswith(message)
