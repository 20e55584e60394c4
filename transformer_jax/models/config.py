"""``ModelConfig``: every architectural choice of the zoo, frozen and validated on construction."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core import migration
from transformer_jax.core.configlib import Config, ConfigError, fail, setting
from transformer_jax.models.baselines.config import BaselineConfig
from transformer_jax.models.kinds import MODELS, TRANSFORMER_KINDS
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.nn.attention_config import AttentionConfig, LocalGlobalAttention, SoftmaxAttention
from transformer_jax.nn.block import BlockConfig, LayerDims, ResidualSpec
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitConfig, InitScheme
from transformer_jax.nn.moe import MoESpec
from transformer_jax.nn.norm_config import LayerNormConfig, NormConfig
from transformer_jax.nn.position_config import LearnedPositions, PositionConfig, RopePositions
from transformer_jax.nn.positions import PositionDims
from transformer_jax.ops import activations, residual

_BIAS_POSITIONS = ("relative_bias", "alibi")
# Fields a checkpoint does not fix (``train --init-from`` may change them; Hugging Face configs do
# not hold them): how the model runs (``execution``) and dropout.
RUNTIME_FIELDS = ("execution", "dropout")
# How fresh weights are drawn: loaded weights replace them.
INIT_FIELDS = ("init",)


@dataclasses.dataclass(frozen=True)
class ModelConfig(Config):
    """Architecture of a ``DecoderLM`` or ``EncoderDecoder`` (``kind``).

    Variants are chosen by name from registries: ``placement`` (ops.residual.PLACEMENTS),
    ``norm`` (one settings class per kind, nn.norm_config; ``model.norm=rmsnorm``, ``model.norm.eps=...``),
    ``position`` (one settings class per encoding, nn.position_config; ``model.position=rope``,
    ``model.position.theta=...``), ``attention`` (one settings class per kind, nn.attention_config:
    softmax, sliding_window, local_global, linear; ``model.attention.qk_norm=true``), ``ffn``
    (ops.activations.FFN_ACTIVATIONS), ``init`` (how fresh weights are drawn, nn.init.InitConfig:
    ``model.init.scheme=xavier``, ``model.init.std``, ``model.init.zero_out``).

    ``final_softcap``: cap * tanh(x / cap) on the output logits (Gemma 2).
    """

    kind: str = setting("decoder_lm", choice=MODELS)
    vocab_size: int = setting(256, ge=2)
    d_model: int = setting(128, ge=1)
    n_heads: int = setting(4, ge=1)
    n_kv_heads: int | None = setting(None, ge=1)  # None: as many as n_heads (MHA); 1: MQA; else GQA
    head_dim: int | None = setting(None, ge=1)  # None: d_model // n_heads
    d_ff: int | None = setting(None, ge=1)  # None: 4 * d_model
    n_layers: int = setting(4, ge=1)  # decoder layers (the whole DecoderLM, or the decoder of EncoderDecoder)
    n_encoder_layers: int = setting(0, ge=0)  # EncoderDecoder only
    max_len: int = setting(1024, ge=1)  # longest sequence (size of a learned position table)
    placement: str = setting("pre", choice=residual.PLACEMENTS)
    norm: NormConfig = setting(factory=LayerNormConfig)  # nn.norm_config; model.norm=rmsnorm, model.norm.eps=...
    position: PositionConfig = setting(factory=LearnedPositions)  # nn.position_config
    ffn: str = setting("gelu", choice=activations.FFN_ACTIVATIONS)
    use_bias: bool = True
    embeddings: EmbeddingsConfig = setting(factory=EmbeddingsConfig)  # nn.embed: tie, scale, share
    dropout: float = setting(0.0, ge=0, lt=1)
    attention: AttentionConfig = setting(factory=SoftmaxAttention)  # nn.attention_config
    final_softcap: float | None = setting(None, gt=0)
    init: InitConfig = setting(factory=InitConfig)  # nn.init: scheme, std, zero_out
    execution: ExecutionConfig = setting(factory=ExecutionConfig)  # dtypes, kernels, scan, remat
    moe: MoEConfig | None = None  # Mixture-of-Experts in place of the FFN (None: dense)
    mla: MLAConfig | None = None  # Multi-head Latent Attention in place of MHA/GQA (None: off)
    mtp: MTPConfig | None = None  # multi-token prediction modules (models.mtp_config; None: off)
    baseline: BaselineConfig | None = None  # the classic LMs' settings, one class per kind (models.baselines.config)

    PATH: ClassVar[str] = "model"
    SELECTORS: ClassVar = (("kind", MODELS),)

    def check(self) -> None:
        if self.kind not in TRANSFORMER_KINDS:
            if self.baseline is None:
                fail(
                    "model.baseline",
                    None,
                    f"model.kind={self.kind!r} needs its settings in model.baseline",
                    f"set --set model.baseline={self.kind} (its defaults)",
                )
            self.baseline.validate(self)
            return
        for rule in TRANSFORMER_RULES:
            rule(self)
        for group in (self.moe, self.mla, self.mtp):
            if group is not None:
                group.validate(self)

    # Derived values --------------------------------------------------------------------------

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def resolved_kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def resolved_d_ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def compute_dtype(self):
        return self.execution.compute_dtype

    @property
    def params_dtype(self):
        return self.execution.params_dtype

    def architecture(self) -> str:
        return "encoder_decoder" if self.kind == "encoder_decoder" else "decoder_only"

    def init_scheme(self) -> InitScheme:
        """GPT-2 scales residual output projections by 1/sqrt(number of residual sublayers)."""
        if self.kind == "encoder_decoder":
            n_sublayers = 2 * self.n_encoder_layers + 3 * self.n_layers
        else:
            n_sublayers = 2 * self.n_layers
        return InitScheme(self.init, n_residual_layers=n_sublayers)

    def position_dims(self, *, bidirectional: bool) -> PositionDims:
        return PositionDims(
            d_model=self.d_model,
            n_heads=self.n_heads,
            max_len=self.max_len,
            bidirectional=bidirectional,
            init_std=self.init.std,
            dtype=self.compute_dtype,
            param_dtype=self.params_dtype,
        )

    def moe_spec(self) -> MoESpec | None:
        """The layer-level MoE settings (fine-grained sizes resolved), or None for a dense model."""
        return None if self.moe is None else self.moe.spec(self.resolved_d_ff, self.ffn)

    def block_configs(self, *, side: str, rope: RopeSpec | None) -> tuple[BlockConfig, ...]:
        """One ``BlockConfig`` per layer of the ``side`` stack: the local layers of
        ``attention=local_global`` are sliding-window (with RoPE base ``position.local_theta``,
        unscaled, when set)."""
        n = self.n_encoder_layers if side == "encoder" else self.n_layers
        local_rope = rope
        if rope is not None and isinstance(self.position, RopePositions) and self.position.local_theta is not None:
            local_rope = self.position.spec(local=True)
        made: dict[bool, BlockConfig] = {}
        for i in range(n):
            local = self.attention.is_local(i)
            if local not in made:
                made[local] = self.block_config(
                    side=side, rope=local_rope if local else rope, attention=self.attention.layer(i)
                )
        return tuple(made[self.attention.is_local(i)] for i in range(n))

    def block_config(
        self, *, side: str, rope: RopeSpec | None, attention: AttentionConfig | None = None
    ) -> BlockConfig:
        """The layer hyperparameters of the ``side`` ("encoder" or "decoder") stack; ``attention``:
        the layer's attention settings (default: those of a global layer, ``self.attention.layer(-1)``)."""
        placement = residual.PLACEMENTS.get(self.placement)
        alpha, beta = placement.constants(
            architecture=self.architecture(),
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_layers,
            side=side,
        )
        return BlockConfig(
            dims=LayerDims(
                d_model=self.d_model,
                n_heads=self.n_heads,
                n_kv_heads=self.resolved_kv_heads,
                head_dim=self.resolved_head_dim,
                d_ff=self.resolved_d_ff,
            ),
            ffn=self.ffn,
            use_bias=self.use_bias,
            norm=self.norm,
            residual=ResidualSpec(self.placement, alpha=alpha, beta=beta),
            dropout=self.dropout,
            attention=self.attention.layer(-1) if attention is None else attention,
            execution=self.execution,
            rope=rope,
            cross=(side == "decoder" and self.kind == "encoder_decoder"),
            init=self.init_scheme(),
            moe=self.moe_spec(),
            mla=self.mla,
            moe_every=1 if self.moe is None else self.moe.every,
            moe_first_dense=0 if self.moe is None else self.moe.first_dense,
        )


# Cross-field rules of a Transformer ModelConfig ----------------------------------------------


def _head_sizes(m: ModelConfig) -> None:
    if m.head_dim is None and m.d_model % m.n_heads:
        fail(
            "model.d_model",
            m.d_model,
            f"is not divisible by n_heads={m.n_heads}",
            "change d_model or n_heads, or set head_dim explicitly",
        )
    if m.n_kv_heads is not None and m.n_heads % m.n_kv_heads:
        fail(
            "model.n_kv_heads",
            m.n_kv_heads,
            f"does not divide n_heads={m.n_heads}",
            "use a divisor of n_heads (1 = multi-query attention)",
        )


def _encoder_layers(m: ModelConfig) -> None:
    if m.kind == "encoder_decoder" and m.n_encoder_layers < 1:
        fail("model.n_encoder_layers", m.n_encoder_layers, "an encoder_decoder needs at least 1 encoder layer")
    if m.kind != "encoder_decoder" and m.n_encoder_layers:
        fail(
            "model.n_encoder_layers",
            m.n_encoder_layers,
            "is only used by kind='encoder_decoder'",
            "set it to 0 or change model.kind",
        )


def _position_fits(m: ModelConfig) -> None:
    kind = m.position.kind
    if kind == "rope" and m.resolved_head_dim % 2:
        fail(
            "model.head_dim",
            m.resolved_head_dim,
            "RoPE rotates pairs of dimensions, so head_dim must be even",
            "change d_model/n_heads or head_dim",
        )
    if kind == "sinusoidal" and m.d_model % 2:
        fail("model.d_model", m.d_model, "sinusoidal positions need an even d_model")
    if m.attention.kind == "linear" and kind in _BIAS_POSITIONS:
        fail(
            "model.position",
            kind,
            "linear attention cannot add a bias to attention logits",
            "use rope, sinusoidal, learned or none with model.attention=linear",
        )
    local_theta = getattr(m.position, "local_theta", None)
    if local_theta is not None and not isinstance(m.attention, LocalGlobalAttention):
        fail(
            "model.position.local_theta",
            local_theta,
            f"is the RoPE base of local layers, and model.attention={m.attention.kind!r} has none",
            "set model.attention=local_global or unset it",
        )


def _local_global_unscanned(m: ModelConfig) -> None:
    if isinstance(m.attention, LocalGlobalAttention) and m.execution.scan_layers:
        fail(
            "model.execution.scan_layers",
            True,
            "a scan repeats one layer, but local_global alternates two kinds",
            "set model.execution.scan_layers=false",
        )


TRANSFORMER_RULES = (_head_sizes, _encoder_layers, _position_fits, _local_global_unscanned)


_EXECUTION_NAMES = frozenset(f.name for f in dataclasses.fields(ExecutionConfig))


def with_changes(cfg: ModelConfig, **changes) -> ModelConfig:
    """``dataclasses.replace(cfg, **changes)``, except that the names of ``ExecutionConfig``'s fields
    (``dtype``, ``scan_layers``, ``attention_impl``...) replace those of ``cfg.execution``; a renamed
    field (``qk_norm``, ``init_std``...) is an error naming where it went."""
    for name in changes:
        moved = migration.renamed_key(f"model.{name}")
        if moved is not None and name not in _EXECUTION_NAMES:
            raise ConfigError(f"model field {name!r} was renamed: {moved} (CHANGELOG lists every renamed key)")
    execution = {k: changes.pop(k) for k in list(changes) if k in _EXECUTION_NAMES}
    if execution:
        changes["execution"] = dataclasses.replace(changes.get("execution", cfg.execution), **execution)
    return dataclasses.replace(cfg, **changes)
