"""Compile a run's programs ahead of time for a target, with or without its hardware.

`compile_train` compiles the exact step ``train`` runs (`train.step.jit_train_step`, the same mesh
rules, shardings and kernel choices for the target's platform) and `compile_decode` the jitted
generation of ``sample``, on abstract arguments: nothing is allocated or run. Each returns a report:
bytes per device (``memory_analysis``), whether they fit the chip, FLOPs per step (the model
formula, and XLA's count with scanned layers corrected), the collectives of the compiled program
(`train.hlo`) and a roofline estimate of the step time (`train.roofline`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.core import targets
from transformer_jax.core.configlib import ConfigError, fail
from transformer_jax.core.targets import Target
from transformer_jax.data.rows import LM_FIELDS, SEQ2SEQ_FIELDS
from transformer_jax.decode.generate import lower_generate
from transformer_jax.models import count_params
from transformer_jax.models.config import with_changes
from transformer_jax.models.forward import FORWARDS
from transformer_jax.nn.attention_config import LocalGlobalAttention
from transformer_jax.parallel import batch_sharding, make_mesh, replicated, sharding_context
from transformer_jax.parallel.context import context_devices
from transformer_jax.parallel.topology import target_devices
from transformer_jax.train import flops, hlo, roofline
from transformer_jax.train.config import Config, resolve
from transformer_jax.train.optim import make_optimizer
from transformer_jax.train.run import check_batch
from transformer_jax.train.state import abstract_model, abstract_state, model_infos
from transformer_jax.train.step import jit_train_step

KINDS = ("decoder_lm", "encoder_decoder")
_EXHAUSTED = (  # XLA:TPU's out-of-memory messages: (needed, available)
    re.compile(r"[Uu]sed ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm"),
    re.compile(r"\(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"),
)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class DoesNotFitError(ValueError):
    """A program needs more memory per device than the chip has."""


def _devices(target: Target | None) -> list:
    return list(jax.devices() if target is None else target_devices(target))


def _batch_structs(cfg: Config, mesh) -> dict:
    B, data = cfg.train.batch_size, cfg.data
    sharding = batch_sharding(mesh)
    if cfg.model.kind == "encoder_decoder":
        lengths = {"S": data.max_src_len, "T": data.seq_len}
        return {
            k: jax.ShapeDtypeStruct((B, lengths[n]), dt, sharding=sharding) for k, (n, dt) in SEQ2SEQ_FIELDS.items()
        }
    return {k: jax.ShapeDtypeStruct((B, data.seq_len), dt, sharding=sharding) for k, dt in LM_FIELDS.items()}


def _key_struct(mesh) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype, sharding=replicated(mesh))


def _lower_train(cfg: Config, mesh):
    tc = cfg.train
    infos = model_infos(cfg.model, tc.lora)
    tx, schedule = make_optimizer(tc.optim, tc.steps, infos=infos, adapters_only=tc.lora is not None)
    task = FORWARDS.get("seq2seq" if cfg.model.kind == "encoder_decoder" else "lm")
    # Built outside the mesh context: optax runs a placeholder init eagerly, which compile-only
    # devices cannot do.
    state = abstract_state(cfg.model, tx, mesh=mesh, lora=tc.lora)
    graphdef = abstract_model(cfg.model, mesh=mesh, lora=tc.lora)[0]
    key = _key_struct(mesh)
    with sharding_context(mesh):
        step = jit_train_step(graphdef, tx, task, tc, schedule, state)
        return step.lower(state, _batch_structs(cfg, mesh), key)


def _compile(lowered) -> tuple[Any, float, str | None]:
    """(compiled or None, seconds, the RESOURCE_EXHAUSTED message or None)."""
    t0 = time.perf_counter()
    try:
        return lowered.compile(), time.perf_counter() - t0, None
    except Exception as e:  # XlaRuntimeError: the compiler's own out-of-memory verdict (TPU)
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return None, time.perf_counter() - t0, str(e).strip().splitlines()[0]


def _cost(compiled) -> dict:
    """XLA's ``flops`` and ``bytes accessed`` per device (None where the platform reports none)."""
    found = compiled.cost_analysis()
    found = found[0] if isinstance(found, list | tuple) and found else found
    cost = found if isinstance(found, dict) else {}
    return {k: (float(cost[k]) if cost.get(k, -1) >= 0 else None) for k in ("flops", "bytes accessed")}


def _scan_period(cfg: Config) -> int:
    m = cfg.model
    period = m.attention.global_every if isinstance(m.attention, LocalGlobalAttention) else 1
    return int(np.lcm(period, m.moe.every if m.moe is not None else 1))


def _xla_cost_corrected(cfg: Config, mesh, raw: dict) -> tuple[dict, str]:
    """XLA's cost of the step with every layer counted: a ``lax.scan`` body is counted once, so a
    scanned model is extrapolated from unrolled compiles of p and 2p layers (p: the layer pattern's
    period): cost(L) = cost(p) + (L / p - 1) * (cost(2p) - cost(p))."""
    if not cfg.model.execution.scan_layers or raw["flops"] is None:
        return raw, "XLA cost_analysis"
    p, L = _scan_period(cfg), cfg.model.dims.n_layers
    costs = []
    for n in (p, 2 * p):
        model = with_changes(cfg.model, n_layers=n, scan_layers=False)
        compiled, _, exhausted = _compile(_lower_train(dataclasses.replace(cfg, model=model), mesh))
        if compiled is None:
            return raw, f"XLA cost_analysis (scan body counted once; the {n}-layer check did not fit: {exhausted})"
        costs.append(_cost(compiled))
    out = {}
    for k in raw:
        one, two = costs[0][k], costs[1][k]
        out[k] = None if one is None or two is None else one + (L / p - 1) * (two - one)
    return out, f"XLA cost_analysis, scanned layers extrapolated from unrolled {p}- and {2 * p}-layer compiles"


def _memory(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    out = {
        "arguments": int(m.argument_size_in_bytes),
        "temporaries": int(m.temp_size_in_bytes),
        "outputs": int(m.output_size_in_bytes),
        "aliased": int(m.alias_size_in_bytes),
        "code": int(m.generated_code_size_in_bytes),
    }
    out["total"] = out["arguments"] + out["temporaries"] + out["outputs"] - out["aliased"] + out["code"]
    return out


def _exhausted_memory(message: str) -> dict[str, int] | None:
    """(bytes needed, bytes available) named in the compiler's RESOURCE_EXHAUSTED message."""
    for pattern in _EXHAUSTED:
        m = pattern.search(message)
        if m is not None:
            return {"total": int(float(m[1]) * _UNITS[m[2]]), "available": int(float(m[3]) * _UNITS[m[4]])}
    return None


def device_memory_bytes(target: Target | None, devices: list) -> int | None:
    """Memory of one device: the chip's for a target, else what the running device reports
    (``bytes_limit``), else the host's physical memory (CPU)."""
    if target is not None:
        return target.chip.memory_bytes
    stats = devices[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _base_report(cfg: Config, target: Target | None, devices: list, mesh) -> dict:
    return {
        "target": target.name if target is not None else f"local {devices[0].platform}",
        "platform": target.platform if target is not None else devices[0].platform,
        "chips": len(devices),
        "slices": target.slices if target is not None else 1,
        "mesh": {k: int(v) for k, v in mesh.shape.items()},
        "params": count_params(cfg.model),
        "device_memory_bytes": device_memory_bytes(target, devices),
    }


def _finish(report: dict, compiled, compile_s: float, exhausted: str | None, keep_hlo: bool = False) -> None:
    report["compile_s"] = compile_s
    if keep_hlo and compiled is not None:
        report["hlo_text"] = compiled.as_text()
    if compiled is None:
        report.update(fits=False, exhausted=exhausted, bytes_per_device=None, collectives={}, hlo_collectives=[])
        numbers = _exhausted_memory(exhausted or "")
        if numbers is not None:  # the compiler's figures: at least this much (it may name temporaries only)
            report["bytes_per_device"] = {"total": numbers["total"]}
            report["available_bytes"] = numbers["available"]
        return
    memory = _memory(compiled)
    limit = report["device_memory_bytes"]
    report.update(bytes_per_device=memory, fits=limit is None or memory["total"] <= limit)
    found = hlo.collectives(compiled.as_text(), report["chips"])
    report.update(collectives=hlo.summarize(found), hlo_collectives=found)


def compile_train(
    cfg: Config, target: Target | None = None, *, correct_scan: bool = True, keep_hlo: bool = False
) -> dict:
    """Compile ``cfg``'s train step for ``target`` (None: the running devices); the report (see the
    module docstring). A step that does not fit has ``fits: False``. ``correct_scan=False`` skips
    the two extra compiles that correct XLA's FLOP count of scanned layers (then reported raw);
    ``keep_hlo`` adds the compiled program's text (``hlo_text``)."""
    cfg = resolve(cfg)
    if cfg.model.kind not in KINDS:
        raise ConfigError(f"compile: model.kind={cfg.model.kind!r} is not a Transformer; it compiles {KINDS}")
    devices = _devices(target)
    mesh = make_mesh(cfg.mesh, devices)
    check_batch(cfg, mesh)
    report = _base_report(cfg, target, devices, mesh)
    with targets.compiling_for(target):
        compiled, compile_s, exhausted = _compile(_lower_train(cfg, mesh))
        _finish(report, compiled, compile_s, exhausted, keep_hlo)
        raw = _cost(compiled) if compiled is not None else {"flops": None, "bytes accessed": None}
        corrected, source = _xla_cost_corrected(cfg, mesh, raw) if correct_scan else (raw, "XLA cost_analysis")
    tokens = cfg.train.batch_size * cfg.data.seq_len
    undercounted = cfg.model.execution.scan_layers and not correct_scan  # a scan body counted once: not a step's FLOPs
    report["flops_per_step"] = {
        "model_formula": flops.model_flops_per_token(cfg.model, cfg.data.seq_len) * tokens,
        "xla_per_device_raw": raw["flops"],
        "xla_per_device": None if undercounted else corrected["flops"],
        "xla_source": "not corrected for scanned layers (correct_scan=False)" if undercounted else source,
    }
    report["hbm_bytes_per_device"] = None if undercounted else corrected["bytes accessed"]
    report["tokens_per_step"] = tokens
    report.update(roofline.estimate(report, target))
    return report


def compile_decode(
    cfg: Config, target: Target | None = None, *, batch: int, prompt_len: int, new_tokens: int, keep_hlo: bool = False
) -> dict:
    """Compile the generation ``sample`` runs (greedy; prompts of ``prompt_len`` tokens, then
    ``new_tokens``) for ``target``; the report as for `compile_train` (memory, collectives)."""
    cfg = resolve(cfg)
    if cfg.model.kind != "decoder_lm":
        raise ConfigError(f"compile --what decode: model.kind={cfg.model.kind!r} has no KV-cached generation here")
    devices = _devices(target)
    mesh = make_mesh(cfg.mesh, devices)
    if context_devices(mesh) > 1:
        fail(
            "mesh.context",
            context_devices(mesh),
            "splits a training sequence; generation keeps the KV cache whole",
            "compile --what decode with mesh.context=1",
        )
    report = _base_report(cfg, target, devices, mesh)
    split = batch % (mesh.shape["data"] * mesh.shape["fsdp"]) == 0
    graphdef, params, model_state = abstract_model(cfg.model, mesh=mesh)
    rows, row = (batch_sharding(mesh), batch_sharding(mesh, 1)) if split else (replicated(mesh),) * 2
    seq = jax.ShapeDtypeStruct((batch, prompt_len + new_tokens), jnp.int32, sharding=rows)
    lengths = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=row)
    key = _key_struct(mesh)
    with targets.compiling_for(target), sharding_context(mesh):
        lowered = lower_generate(
            graphdef,
            (params, model_state),
            seq,
            lengths,
            key,
            start=prompt_len,
            max_new_tokens=new_tokens,
        )
        compiled, compile_s, exhausted = _compile(lowered)
    _finish(report, compiled, compile_s, exhausted, keep_hlo)
    report.update(batch=batch, prompt_len=prompt_len, new_tokens=new_tokens)
    return report


def check_fits(step, state, cfg: Config, mesh, *, limit: int | None = None) -> dict[str, int]:
    """Compile ``train``'s jitted ``step`` for ``state`` and ``cfg``'s batch and raise
    `DoesNotFitError` (bytes needed, bytes there, what to change) when a device's share exceeds
    ``limit`` (default: the device's memory); returns the bytes per device."""
    devices = list(mesh.devices.flat)
    limit = device_memory_bytes(None, devices) if limit is None else limit
    with sharding_context(mesh):
        compiled, _, exhausted = _compile(step.lower(state, _batch_structs(cfg, mesh), _key_struct(mesh)))
    memory = _memory(compiled) if compiled is not None else (_exhausted_memory(exhausted or "") or {})
    need = memory.get("total")
    if compiled is not None and (limit is None or need is None or need <= limit):
        return memory
    facts = {"mesh": {k: int(v) for k, v in mesh.shape.items()}, "chips": len(devices), "platform": devices[0].platform}
    needs = "more than it has" if need is None else f"{need / 2**30:.2f} GiB ({need} bytes)"
    has = "" if limit is None else f"; a {devices[0].device_kind} has {limit / 2**30:.2f} GiB ({limit} bytes)"
    raise DoesNotFitError(
        f"the train step does not fit: each device needs {needs}{has}. Try: {'; '.join(what_to_change(cfg, facts))}"
    )


def what_to_change(cfg: Config, report: dict) -> list[str]:
    """Settings that lower the memory per device, for a report that does not fit."""
    m, mesh = cfg.model, report["mesh"]
    out = []
    if m.execution.remat == "none":
        out.append("model.execution.remat=full (recompute activations in the backward pass)")
    if mesh["fsdp"] < report["chips"]:
        out.append(f"mesh.fsdp={report['chips']} mesh.data=1 (shard parameters and optimizer state over every chip)")
    out.append(
        f"a smaller train.batch_size (now {cfg.train.batch_size}) with train.grad_accum to keep the tokens per step"
    )
    if report["platform"] == "tpu" and m.execution.attention_impl not in ("splash", "auto"):
        out.append("model.execution.attention_impl=splash (no T x S attention matrix in memory)")
    return out
