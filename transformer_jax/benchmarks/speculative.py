"""``bench decode --speculative``: greedy decoding drafted by the model's multi-token prediction
modules (``decode.speculative``) against plain cached greedy decoding, on one model.

Measures at batch 1 (and ``batch`` if larger), ``new_tokens`` after a prompt: the acceptance rate
(accepted drafts / drafted tokens = accepted / (verify steps * D)), tokens per verify step, whether
the tokens equal plain greedy's, and tokens/s of each (medians of ``rounds`` calls, the two
called in turn). ``workdir``: a trained run (``--set model.mtp=...``) whose latest checkpoint is
measured and whose tokenizer encodes ``prompt``; without it, random weights of the config's model
(acceptance then means little).
"""

from __future__ import annotations

import os
import statistics
import time

import jax
import numpy as np
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.decode import generate
from transformer_jax.decode.speculative import speculative_generate
from transformer_jax.train.timing import alternating_rounds

PROMPT = "ROMEO:\nWhat light through yonder window breaks?\n"


def _model(cfg, workdir: str | None):
    """(graphdef, states, model config, prompt ids) of the run in ``workdir`` or of ``cfg``."""
    if workdir is None:
        from transformer_jax.models import build_model

        graphdef, *states = nnx.split(build_model(cfg.model))
        return graphdef, tuple(states), cfg.model, [1, 2, 3, 4]
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(workdir_config(workdir, []), workdir, devices=jax.devices()[:1])
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints")
    state = run.state
    return run.graphdef, (state.params, state.model_state), run.cfg.model, run.data.tokenizer.encode(PROMPT)


def _timed(fn):
    def timer():
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        return time.perf_counter() - t0

    return timer


def bench_speculative(cfg, workdir: str | None = None, *, new_tokens: int = 256, batches=(1,), rounds: int = 5) -> dict:
    graphdef, states, model_cfg, ids = _model(cfg, workdir)
    if model_cfg.mtp is None:
        raise ConfigError("bench decode --speculative needs a model with MTP modules: --set model.mtp=on")
    if model_cfg.position.kind == "learned":  # the table ends at max_len: shorten the generation to fit
        new_tokens = min(new_tokens, model_cfg.dims.max_len - len(ids))
    out = {
        "bench": "decode_speculative",
        "workdir": workdir,
        "mtp_depth": model_cfg.mtp.depth,
        "prompt_tokens": len(ids),
        "new_tokens": new_tokens,
        "rounds": rounds,
        "threads": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
    }
    for b in batches:
        prompt = np.tile(np.asarray([ids], np.int32), (b, 1))
        plain = lambda x=prompt: generate(graphdef, states, prompt_BP=x, max_new_tokens=new_tokens).tokens
        spec = lambda x=prompt: speculative_generate(graphdef, states, prompt_BP=x, max_new_tokens=new_tokens)
        greedy, drafted = jax.device_get(plain()), jax.device_get(spec())  # compiles both
        times = alternating_rounds({"greedy": _timed(plain), "speculative": _timed(spec)}, rounds)
        steps, accepted = int(drafted.steps), int(drafted.accepted)
        t_plain, t_spec = statistics.median(times["greedy"]), statistics.median(times["speculative"])
        out[f"b{b}"] = {
            "identical_to_greedy": bool(np.array_equal(greedy, drafted.tokens)),
            "verify_steps": steps,
            "acceptance_rate": accepted / max(steps * model_cfg.mtp.depth, 1),
            "tokens_per_step": 1 + accepted / max(steps, 1),
            "greedy_tokens_per_s": b * new_tokens / t_plain,
            "speculative_tokens_per_s": b * new_tokens / t_spec,
            "speedup": t_plain / t_spec,
            "greedy_s_runs": times["greedy"],
            "speculative_s_runs": times["speculative"],
        }
    return out
