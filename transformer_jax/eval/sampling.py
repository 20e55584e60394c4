"""Text from a run's model: continue a prompt (decoder-only) or translate it (seq2seq).

``run`` is anything with ``graphdef``, ``cfg`` and ``data.tokenizer`` (a ``train.run.Run``); the
state is passed separately so that the training loop can sample its current parameters.
A prompt with characters the tokenizer cannot represent warns and names them (``strict``: error).
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from transformer_jax.core.configlib import ConfigError, ConfigWarning
from transformer_jax.decode import Greedy, SamplingConfig, beam_search, generate, translate, translate_beam


def check_prompt(tokenizer, text: str, *, strict: bool = False) -> None:
    """Warns (``strict``: raises ConfigError) when ``text`` holds pieces ``tokenizer`` cannot represent."""
    missing = tokenizer.unrepresentable(text)
    if not missing:
        return
    shown = ", ".join(repr(m) for m in missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
    message = (
        f"the prompt holds {len(missing)} character(s) the run's {tokenizer.kind} tokenizer cannot represent: "
        f"{shown}; they are encoded as unknown (id {tokenizer.unk_id})"
    )
    if strict:
        raise ConfigError(message + " (drop --strict-prompt to sample anyway)")
    warnings.warn(message, ConfigWarning, stacklevel=2)


def _continue_lm(
    run, params, ids: list[int], *, max_new_tokens: int, sampling, beam: int | None, alpha: float, seed: int
) -> list[int]:
    tok = run.data.tokenizer
    context = run.cfg.model.dims.max_len if run.cfg.model.position.kind == "learned" else None
    if beam is not None:
        prompt = ids if context is None else ids[-(context - 1) :]
        room = max_new_tokens if context is None else min(max_new_tokens, context - len(prompt))
        out = beam_search(
            run.graphdef,
            params,
            prompt_BP=np.asarray([prompt]),
            max_new_tokens=room,
            beam_size=beam,
            alpha=alpha,
            eos_id=tok.eos_id,
        )
        return np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])]).tolist()
    new: list[int] = []
    key = jax.random.key(seed)
    while len(new) < max_new_tokens:
        # A learned position table holds max_len positions: continue from the last half-context
        # once it is full (nanoGPT crops its context the same way).
        prompt = (ids + new) if context is None else (ids + new)[-(context // 2 if new else context - 1) :]
        room = max_new_tokens - len(new) if context is None else min(context - len(prompt), max_new_tokens - len(new))
        out = generate(
            run.graphdef,
            params,
            prompt_BP=np.asarray([prompt]),
            max_new_tokens=room,
            key=jax.random.fold_in(key, len(new)),
            sampling=sampling,
            eos_id=tok.eos_id,
        )
        new += np.asarray(out.tokens[0, : int(out.lengths[0])]).tolist()
        if new and new[-1] == tok.eos_id:
            break
    return new


def _translate(
    run, params, text: str, *, max_new_tokens: int, sampling, beam: int | None, alpha: float, seed: int
) -> list[int]:
    tok = run.data.tokenizer
    src = np.asarray([tok.encode(text)[: run.cfg.data.max_src_len - 1] + [tok.eos_id]])
    if beam is not None:
        out = translate_beam(
            run.graphdef,
            params,
            src_BS=src,
            max_new_tokens=max_new_tokens,
            beam_size=beam,
            alpha=alpha,
            bos_id=tok.bos_id,
            eos_id=tok.eos_id,
        )
        return np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])]).tolist()
    out = translate(
        run.graphdef,
        params,
        src_BS=src,
        max_new_tokens=max_new_tokens,
        key=jax.random.key(seed),
        sampling=sampling,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    )
    return np.asarray(out.tokens[0, : int(out.lengths[0])]).tolist()


def sample_from(
    run,
    state,
    prompt: str,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = Greedy(),
    beam: int | None = None,
    alpha: float = 0.6,
    seed: int = 0,
    strict_prompt: bool = False,
) -> str:
    """Decoder-only runs: ``prompt`` + its continuation; seq2seq runs: the translation of ``prompt``.
    ``beam``: beam width (None: token by token with ``sampling``)."""
    tok = run.data.tokenizer
    check_prompt(tok, prompt, strict=strict_prompt)
    params = jax.device_get((state.params, state.model_state))
    kw: dict[str, Any] = dict(max_new_tokens=max_new_tokens, sampling=sampling, beam=beam, alpha=alpha, seed=seed)
    if run.data.task == "lm":
        return prompt + tok.decode(_continue_lm(run, params, tok.encode(prompt) or [tok.bos_id], **kw))
    return tok.decode(_translate(run, params, prompt, **kw))
