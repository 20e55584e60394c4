"""core.tracing.cheap_tracer_errors: the equation walk of tracer attribute errors is skipped only
inside the block (nested or not), and shapes traced inside are the same."""

import jax
import jax.numpy as jnp
from jax._src.interpreters import partial_eval as pe

from transformer_jax.core.tracing import cheap_tracer_errors
from transformer_jax.models import ModelConfig, ModelDims
from transformer_jax.models.util import abstract_model


def _walks(monkeypatch) -> int:
    """How many times probing ``tracer.sharding`` (as flax does) walked the traced equations."""
    calls = []
    original = pe.JaxprStackFrame.find_progenitors
    monkeypatch.setattr(pe.JaxprStackFrame, "find_progenitors", lambda *a: calls.append(1) or original(*a))

    def f(x):
        y = jnp.sin(x) * 2
        assert getattr(y, "sharding", None) is None
        return y

    jax.eval_shape(f, jnp.ones(3))
    monkeypatch.undo()
    return len(calls)


def test_origin_walk_skipped_only_inside_the_block_and_restored_after_nesting(monkeypatch):
    assert _walks(monkeypatch) == 1, "this jax no longer walks (jax-ml/jax#40041): core/tracing.py can go"
    with cheap_tracer_errors():
        with cheap_tracer_errors():
            assert _walks(monkeypatch) == 0
        assert _walks(monkeypatch) == 0
    assert _walks(monkeypatch) == 1


def test_restored_when_the_block_raises(monkeypatch):
    try:
        with cheap_tracer_errors():
            raise KeyError("boom")
    except KeyError:
        pass
    assert _walks(monkeypatch) == 1


def test_abstract_model_shapes_match_a_built_model():
    from flax import nnx

    from transformer_jax.models import build_model

    cfg = ModelConfig(dims=ModelDims(vocab_size=17, d_model=16, n_heads=2, d_ff=32, n_layers=3, max_len=8))
    shapes = lambda m: jax.tree.map(lambda x: (x.shape, x.dtype), nnx.to_pure_dict(nnx.state(m)))
    assert shapes(abstract_model(cfg)) == shapes(build_model(cfg))
