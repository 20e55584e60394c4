"""Settings of the classic LMs (``model.baseline``): one class per baseline kind, chosen by name.

The variant's name is its ``model.kind``: ``ngram`` (counts, `NgramConfig`), ``window_lm`` (Bengio et
al. 2003, `WindowLMConfig`), ``rnn_lm`` (`RNNLMConfig`); ``--set model.baseline=rnn_lm`` chooses one,
``model.baseline.tbptt=32`` sets its field. The n-gram's smoothing and the RNN's cell are chosen the
same way (``model.baseline.smoothing=add_k``, ``model.baseline.smoothing.k=0.5``).

The neural baselines also read these ``ModelConfig`` fields: ``dims.vocab_size``, ``dims.d_model``
(embedding width; the RNN hidden size), ``dims.d_ff`` (the window MLP's hidden width, default
4 * d_model; window_lm only), ``dims.n_layers`` (tanh layers of the window MLP / stacked RNN layers),
``dropout``, ``init.std``, ``embeddings.tie``, ``execution.dtype``, ``execution.param_dtype``. They have
no position encoding:
``model.position`` must be ``"none"`` (``models.presets.baseline_model_config`` sets it).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from transformer_jax.core.configlib import Variant, fail, setting, variant
from transformer_jax.core.registry import Registry


class SmoothingConfig(Variant):
    """How the n-gram spreads probability over unseen continuations (``model.baseline.smoothing``)."""

    PATH = "model.baseline.smoothing"
    VARIANTS: typing.ClassVar[Registry[type[SmoothingConfig]]] = Registry("n-gram smoothing")

    def fit_kwargs(self) -> dict[str, Any]:
        """``NGramLM.fit``'s smoothing arguments."""
        raise NotImplementedError


@variant("kneser_ney")
@dataclasses.dataclass(frozen=True)
class KneserNeySmoothing(SmoothingConfig):
    """Interpolated Kneser-Ney (Chen & Goodman 1998) with one absolute ``discount`` per order
    (None: estimated per order as n1 / (n1 + 2 n2) from the count-of-counts)."""

    discount: float | None = setting(None, gt=0.0, le=1.0)

    def fit_kwargs(self) -> dict[str, Any]:
        return {"smoothing": self.kind, "discount": self.discount}


@variant("add_k")
@dataclasses.dataclass(frozen=True)
class AddKSmoothing(SmoothingConfig):
    """Add-k (Lidstone): ``(c(h, w) + k) / (c(h) + k V)``, no backoff."""

    k: float = setting(1.0, gt=0.0)

    def fit_kwargs(self) -> dict[str, Any]:
        return {"smoothing": self.kind, "add_k": self.k}


class RNNCellConfig(Variant):
    """The recurrent cell of ``rnn_lm`` (``model.baseline.cell``; ``models.baselines.rnn.CELLS``)."""

    PATH = "model.baseline.cell"
    VARIANTS: typing.ClassVar[Registry[type[RNNCellConfig]]] = Registry("RNN cell")

    def cell_kwargs(self) -> dict[str, Any]:
        """The cell class's own keyword arguments."""
        return {}


@variant("lstm")
@dataclasses.dataclass(frozen=True)
class LSTMCellConfig(RNNCellConfig):
    """LSTM with a forget gate; ``forget_bias`` is added to the forget-gate bias at initialisation."""

    forget_bias: float = 1.0

    def cell_kwargs(self) -> dict[str, Any]:
        return {"forget_bias": self.forget_bias}


@variant("gru")
@dataclasses.dataclass(frozen=True)
class GRUCellConfig(RNNCellConfig):
    """GRU (Cho et al. 2014)."""


class BaselineConfig(Variant):
    """Settings that only the classic language models read; the variant's name is its ``model.kind``."""

    PATH = "model.baseline"
    VARIANTS: typing.ClassVar[Registry[type[BaselineConfig]]] = Registry("baseline")

    def validate(self, model_cfg: Any) -> None:
        """Checks against the enclosing ModelConfig (its own fields are checked at construction:
        each declares its range or choice)."""
        if model_cfg.kind != self.kind:
            fail(
                "model.baseline",
                self.kind,
                f"holds the settings of {self.kind!r}, but model.kind={model_cfg.kind!r}",
                f"set --set model.baseline={model_cfg.kind} (its settings) or model.kind={self.kind}",
            )
        if model_cfg.moe is not None:
            fail(
                "model.moe",
                type(model_cfg.moe).__name__,
                f"model.kind={self.kind!r} has no feed-forward layers to turn into experts",
                "set model.moe=None",
            )


@variant("ngram")
@dataclasses.dataclass(frozen=True)
class NgramConfig(BaselineConfig):
    """A count-based n-gram: ``ngram_order`` n (a history of n - 1 tokens) and its ``smoothing``."""

    ngram_order: int = setting(3, ge=1)
    smoothing: SmoothingConfig = setting(factory=KneserNeySmoothing)


class _NeuralBaseline(BaselineConfig):
    def validate(self, model_cfg: Any) -> None:
        super().validate(model_cfg)
        if model_cfg.position.kind != "none":
            fail(
                "model.position",
                model_cfg.position.kind,
                f"model.kind={self.kind!r} has no position encoding",
                "set --set model.position=none (or build the config with baseline_model_config)",
            )


@variant("window_lm")
@dataclasses.dataclass(frozen=True)
class WindowLMConfig(_NeuralBaseline):
    """Bengio et al. (2003): the embeddings of ``window`` N tokens (the current one and N - 1
    before it) concatenated into an MLP; ``direct``: the direct input -> output connections."""

    window: int = setting(8, ge=1)
    direct: bool = False

    def validate(self, model_cfg: Any) -> None:
        super().validate(model_cfg)
        m = model_cfg
        width, d_model = m.dims.resolved_d_ff, m.dims.d_model
        if m.embeddings.tie and width != d_model:
            fail(
                "model.embeddings.tie",
                True,
                f"the window MLP's output width d_ff={width} differs from d_model={d_model}",
                "set model.embeddings.tie=false or model.dims.d_ff=model.dims.d_model",
            )


@variant("rnn_lm")
@dataclasses.dataclass(frozen=True)
class RNNLMConfig(_NeuralBaseline):
    """A stacked RNN of ``cell`` (lstm | gru); ``tbptt``: gradients flow back at most this many steps
    inside a training window (None: through the whole window, i.e. truncation at ``data.seq_len``)."""

    cell: RNNCellConfig = setting(factory=LSTMCellConfig)
    tbptt: int | None = setting(None, ge=1)
