"""One MoE layer against the dense FFN at equal active parameters, forward + backward, by load skew.

Where the dropless MoE train step's extra time goes: ``nn.moe.MoE`` (8 GELU experts of width
``F``, top-2, renormalised, Switch balance loss 0.01) against ``nn.mlp.FeedForward`` of width
``2 F`` on the same [B, T, D] input, each as one jitted value-and-grad, timed in alternation
(medians of ``--rounds`` rounds of ``--calls`` calls). The load skew is set through the
auxiliary-loss-free bias (``bias[e] = skew * (2 e / (E - 1) - 1)``, not updated): at
initialisation the router's logits are small, so the bias decides the load. Also times the
GEMM shapes one overflow tile and the first round run (``--gemms``); ``--dispatch padded grouped``
times each implementation at each skew::

    python -m transformer_jax.benchmarks.moe_layer --skews 0 0.0125 0.025 --gemms

Prints one line per variant and a JSON object last.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer_jax.core import compiler
from transformer_jax.nn.mlp import FeedForward
from transformer_jax.nn.moe import MoE, MoESpec
from transformer_jax.nn.moe_config import BalanceLossConfig, SoftmaxRouter
from transformer_jax.train.timing import alternating_rounds


def value_and_grad_fn(module, call):
    """``f(params, x)``: jitted value and gradient of ``sum(y^2) + aux losses`` of ``call(module, x)``."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(p, x):
        y, aux = call(nnx.merge(graphdef, p, rest), x)
        return jnp.sum(y * y) + sum(jnp.sum(v) for v in jax.tree.leaves(aux.get("losses", {})))

    return compiler.jit(jax.value_and_grad(loss, argnums=(0, 1))), params


def time_alternating(fns: dict, rounds: int, calls: int) -> dict[str, float]:
    """Median milliseconds per call of each ``(f, args)``, the variants run in alternation
    (`train.timing.alternating_rounds`)."""
    for f, args in fns.values():
        jax.block_until_ready(f(*args))

    def ms_per_call(f, args) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            out = f(*args)
        jax.block_until_ready(out)
        return 1e3 * (time.perf_counter() - t0) / calls

    timers = {k: (lambda f=f, args=args: ms_per_call(f, args)) for k, (f, args) in fns.items()}
    times = alternating_rounds(timers, rounds)
    return {k: float(np.median(v)) for k, v in times.items()}


def gemm_ms(shapes, rounds: int, calls: int) -> dict[str, float]:
    """Milliseconds per [M, D] x [D, F] GEMM, alone and as 8 tiles of a ``fori_loop``."""
    rng = np.random.default_rng(0)
    fns = {}
    for M, D, F in shapes:
        x, w = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((M, D), (D, F)))
        fns[f"gemm {M}x{D}x{F}"] = (compiler.jit(jnp.matmul), (x, w))
    M, D, F = shapes[0]
    x8, w8 = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((8, M, D), (8, D, F)))

    def loop(x, w, n):
        return jax.lax.fori_loop(0, n, lambda i, acc: acc + x[i] @ w[i], jnp.zeros((M, F)))

    fns[f"fori_loop of 8 x gemm {M}x{D}x{F}"] = (compiler.jit(loop), (x8, w8, jnp.int32(8)))
    fns[f"batched 8 x gemm {M}x{D}x{F}"] = (compiler.jit(lambda x, w: jnp.einsum("gmd,gdf->gmf", x, w)), (x8, w8))
    return time_alternating(fns, rounds, calls)


def main():
    assert __doc__ is not None  # the module docstring names the tool
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--d-expert", type=int, default=256)
    p.add_argument("--skews", type=float, nargs="+", default=[0.0, 0.0125, 0.025])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--gemms", action="store_true", help="also time the tile / first-round GEMM shapes")
    p.add_argument("--dispatch", nargs="+", default=["auto"], help="MoE dispatch implementations to time")
    a = p.parse_args()
    D, F, E, K = a.d_model, a.d_expert, 8, 2
    x = jnp.asarray(np.random.default_rng(0).normal(size=(a.batch, a.seq, D)), jnp.float32)
    fns = {"dense": value_and_grad_fn(FeedForward(D, K * F, kind="gelu", rngs=nnx.Rngs(0)), lambda m, x: (m(x), {}))}
    load = {}
    for skew, dispatch in ((s, d) for s in a.skews for d in a.dispatch):
        spec = MoESpec(
            n_experts=E,
            top_k=K,
            d_expert=F,
            router=SoftmaxRouter(renormalize=True, bias_update_rate=1e-3),
            balance=BalanceLossConfig(loss="switch", coef=0.01),
            dispatch=dispatch,
        )
        moe = MoE(D, spec, rngs=nnx.Rngs(1))
        assert moe.bias is not None  # router.bias_update_rate > 0
        moe.bias[...] = jnp.asarray(skew * np.linspace(-1.0, 1.0, E), jnp.float32)
        name = f"moe skew {skew:g}" + ("" if a.dispatch == ["auto"] else f" {dispatch}")
        load[name] = float(moe(x)[1]["metrics"]["moe_load_max_over_mean"])
        fns[name] = value_and_grad_fn(moe, lambda m, x: m(x, train=False))
    fns = {k: (f, (params, x)) for k, (f, params) in fns.items()}
    ms = time_alternating(fns, a.rounds, a.calls)
    out = {"tokens": a.batch * a.seq, "d_model": D, "d_expert": F, "experts": E, "top_k": K, "layer": {}}
    for k, v in ms.items():
        out["layer"][k] = {
            "ms": round(v, 3),
            "ratio_to_dense": round(v / ms["dense"], 3),
            **({"load_max_over_mean": round(load[k], 3)} if k in load else {}),
        }
        print(
            f"{k:24s} {v:8.3f} ms  {v / ms['dense']:.2f}x dense"
            + (f"  load max/mean {load[k]:.2f}" if k in load else "")
        )
    if a.gemms:
        mean = a.batch * a.seq * K // E
        g = gemm_ms([(mean // 4, D, F), (mean, D, F), (a.batch * a.seq, D, K * F)], a.rounds, 10 * a.calls)
        out["gemm_ms"] = {k: round(v, 4) for k, v in g.items()}
        for k, v in g.items():
            print(f"{k:36s} {1e3 * v:8.1f} us")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
