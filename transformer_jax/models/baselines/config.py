"""``BaselineConfig``: settings of the classic LMs (``model.baseline``), used when ``model.kind``
is one of the baseline kinds: ``ngram`` (counts), ``window_lm`` (Bengio et al. 2003), ``rnn_lm``.

The neural baselines also read these ``ModelConfig`` fields: ``vocab_size``, ``d_model``
(embedding width; the RNN hidden size), ``d_ff`` (the window MLP's hidden width, default
4 * d_model), ``n_layers`` (tanh layers of the window MLP / stacked RNN layers), ``dropout``,
``init.std``, ``embeddings.tie``, ``dtype``, ``param_dtype``. They have no position encoding:
``model.position`` must be ``"none"`` (``models.presets.baseline_model_config`` sets it).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.core.registry import Registry
from transformer_jax.models.baselines.rnn import CELLS

BASELINE_KINDS = ("ngram", "window_lm", "rnn_lm")
SMOOTHINGS: Registry[str] = Registry("n-gram smoothing")
SMOOTHINGS.register("kneser_ney", "interpolated Kneser-Ney (Chen & Goodman 1998)", reads=("discount",))
SMOOTHINGS.register("add_k", "add-k (Lidstone)", reads=("add_k",))


@dataclasses.dataclass(frozen=True)
class BaselineConfig(Config):
    """Settings that only the classic language models read.

    n-gram (``kind="ngram"``): ``ngram_order`` n (history of n - 1 tokens); ``smoothing``:
    ``kneser_ney`` (interpolated, Chen & Goodman 1998, one absolute ``discount`` per order;
    None estimates it per order as n1 / (n1 + 2 n2) from the count-of-counts) or ``add_k``
    (``(c(h, w) + k) / (c(h) + k V)``, no backoff).
    Window LM (``kind="window_lm"``): ``window`` N tokens (the current one and N - 1 before it)
    whose embeddings are concatenated; ``direct``: Bengio's direct input -> output connections.
    RNN LM (``kind="rnn_lm"``): ``cell`` lstm | gru; ``tbptt``: gradients flow back at most
    this many steps inside a training window (None: through the whole window, i.e. truncation at
    ``data.seq_len``); ``forget_bias`` is added to the LSTM forget-gate bias at initialisation.
    """

    ngram_order: int = setting(3, ge=1)
    smoothing: str = setting("kneser_ney", choice=SMOOTHINGS)
    discount: float | None = setting(None, gt=0.0, le=1.0)  # None: estimated per order from the count-of-counts
    add_k: float = setting(1.0, gt=0.0)
    window: int = setting(8, ge=1)
    direct: bool = False
    cell: str = setting("lstm", choice=CELLS)
    tbptt: int | None = setting(None, ge=1)
    forget_bias: float = 1.0

    SELECTORS: ClassVar = (("smoothing", SMOOTHINGS),)
    PATH: ClassVar[str] = "model.baseline"

    def validate(self, model_cfg) -> None:
        """Checks against the enclosing ModelConfig (its own fields are checked at construction:
        each declares its range or choice)."""
        kind = model_cfg.kind
        if kind not in BASELINE_KINDS:
            fail("model.kind", kind, "is not a baseline kind", f"choose one of: {', '.join(BASELINE_KINDS)}")
        if model_cfg.moe is not None:
            fail(
                "model.moe",
                type(model_cfg.moe).__name__,
                f"model.kind={kind!r} has no feed-forward layers to turn into experts",
                "set model.moe=None",
            )
        if kind == "ngram":
            return
        self._validate_neural(model_cfg)

    def _validate_neural(self, m) -> None:
        if m.position.kind != "none":
            fail(
                "model.position",
                m.position.kind,
                f"model.kind={m.kind!r} has no position encoding",
                "set --set model.position=none (or build the config with baseline_model_config)",
            )
        if m.kind == "window_lm":
            width, d_model = m.dims.resolved_d_ff, m.dims.d_model
            if m.embeddings.tie and width != d_model:
                fail(
                    "model.embeddings.tie",
                    True,
                    f"the window MLP's output width d_ff={width} differs from d_model={d_model}",
                    "set model.embeddings.tie=false or model.dims.d_ff=model.dims.d_model",
                )
