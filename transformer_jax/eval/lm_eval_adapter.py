"""Our decoder-only models behind lm-evaluation-harness' model interface (``pip install
'transformer-jax[lmeval]'``), so that ``lm_eval.simple_evaluate`` drives them on any of its tasks:

    from transformer_jax.eval.lm_eval_adapter import JaxLM
    lm = JaxLM.from_pretrained("path/to/hf-model")          # or JaxLM(model, tokenizer, max_len=...)
    lm_eval.simple_evaluate(model=lm, tasks=["hellaswag"])

``loglikelihood`` (the harness' tokenization: ``TemplateLM._encode_pair``) and
``loglikelihood_rolling`` run on the batched, bucketed ``Scorer``; ``generate_until`` decodes greedily
(one request at a time) and cuts the text at the first ``until`` string.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from lm_eval.api.instance import Instance
from lm_eval.api.model import TemplateLM
from tqdm.auto import tqdm

from transformer_jax.data import HFTokenizer
from transformer_jax.eval.loglikelihood import Request, Scorer, rolling_requests

DEFAULT_MAX_GEN_TOKS = 256


class JaxLM(TemplateLM):
    """``model``: a ``DecoderLM``; ``tokenizer``: ours (an ``HFTokenizer`` adds its own special tokens
    like the harness' ``hf`` model; our other tokenizers get a BOS first)."""

    backend = "causal"

    def __init__(self, model: nnx.Module, tokenizer, *, max_len: int, batch_size: int = 16, progress: bool = True):
        super().__init__()
        self.model, self.tokenizer, self.max_len = model, tokenizer, max_len
        self.scorer = Scorer(model, max_len=max_len, batch_size=batch_size, progress=progress)

    @classmethod
    def from_pretrained(cls, path: str, *, dtype: str = "float32", **kwargs) -> JaxLM:
        """A Hugging Face model directory (weights and tokenizer) through ``models.hf.from_pretrained``."""
        from transformer_jax.models.hf import from_pretrained

        cfg, model = from_pretrained(path, dtype=dtype)
        return cls(model, HFTokenizer.from_pretrained(path), max_len=cfg.dims.max_len, **kwargs)

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def prefix_token_id(self) -> int:
        return self.tokenizer.bos_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        special = True if add_special_tokens is None else add_special_tokens
        if isinstance(self.tokenizer, HFTokenizer):
            return self.tokenizer.encode(string, add_special_tokens=special)
        return [self.tokenizer.bos_id] * special + self.tokenizer.encode(string)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        batch = [Request((*context, *continuation), len(continuation)) for _, context, continuation in requests]
        return self.scorer.score(batch, desc="lm_eval loglikelihood")

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Each document's log-likelihood, every token scored once in windows of ``max_len``."""
        per_doc = [
            rolling_requests(self.tok_encode(r.args[0], False), self.prefix_token_id, self.max_len) for r in requests
        ]
        lls = iter(self.scorer.score([w for doc in per_doc for w in doc], desc="lm_eval rolling"))
        return [sum(next(lls)[0] for _ in doc) for doc in per_doc]

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        from transformer_jax.decode import Greedy, generate

        out = []
        for r in tqdm(requests, desc="lm_eval generate_until", disable=disable_tqdm):
            args: tuple = r.args  # (context, generation kwargs)
            context, gen_kwargs = args
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            room = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            ids = (
                self.tok_encode(context)[-(self.max_len - room) :] if room < self.max_len else self.tok_encode(context)
            )
            gen = generate(
                self.model,
                prompt_BP=np.asarray([ids or [self.prefix_token_id]], np.int32),
                max_new_tokens=room,
                key=jax.random.key(0),
                sampling=Greedy(),
                eos_id=self.eot_token_id,
            )
            text = self.tokenizer.decode(np.asarray(gen.tokens[0, : int(gen.lengths[0])]).tolist())
            for stop in until:
                text = text.split(stop)[0]
            out.append(text)
        return out
