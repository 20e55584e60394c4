"""``ModelConfig``: every architectural choice of the zoo, frozen and validated on construction."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core import migration
from transformer_jax.core.configlib import Config, ConfigError, fail, setting
from transformer_jax.models.baselines.config import BaselineConfig
from transformer_jax.models.dims_config import DIMS_NAMES, ModelDims
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
from transformer_jax.nn.position_config import LearnedPositions, PositionConfig, RopePositions, YarnScaling
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
    """Architecture of a ``DecoderLM`` or ``EncoderDecoder`` (``kind``, or a baseline's).

    ``dims``: the sizes (models.dims_config.ModelDims: ``model.dims.d_model``, ``model.dims.n_layers``...).
    Variants are chosen by name from registries: ``placement`` (ops.residual.PLACEMENTS),
    ``norm`` (one settings class per kind, nn.norm_config; ``model.norm=rmsnorm``, ``model.norm.eps=...``),
    ``position`` (one settings class per encoding, nn.position_config; ``model.position=rope``,
    ``model.position.theta=...``), ``attention`` (one settings class per kind, nn.attention_config:
    softmax, sliding_window, local_global, linear; ``model.attention.qk_norm=true``), ``ffn``
    (ops.activations.FFN_ACTIVATIONS), ``init`` (how fresh weights are drawn, nn.init.InitConfig:
    ``model.init.scheme=xavier``, ``model.init.std``, ``model.init.zero_out``).
    """

    kind: str = setting("decoder_lm", choice=MODELS)
    dims: ModelDims = setting(factory=ModelDims)  # models.dims_config: sizes, heads, layers, max_len
    placement: str = setting("pre", choice=residual.PLACEMENTS)
    norm: NormConfig = setting(factory=LayerNormConfig)  # nn.norm_config; model.norm=rmsnorm, model.norm.eps=...
    position: PositionConfig = setting(factory=LearnedPositions)  # nn.position_config
    ffn: str = setting("gelu", choice=activations.FFN_ACTIVATIONS)
    use_bias: bool = True
    embeddings: EmbeddingsConfig = setting(factory=EmbeddingsConfig)  # nn.embed: tie, scale, share, final_softcap
    dropout: float = setting(0.0, ge=0, lt=1)
    attention: AttentionConfig = setting(factory=SoftmaxAttention)  # nn.attention_config
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
        if self.baseline is not None:
            fail(
                "model.baseline",
                self.baseline.kind,
                f"holds the settings of model.kind={self.baseline.kind!r}, and model.kind={self.kind!r} reads none",
                "set model.baseline=none",
            )
        for rule in TRANSFORMER_RULES:
            rule(self)
        for group in (self.moe, self.mla, self.mtp):
            if group is not None:
                group.validate(self)

    # Derived values --------------------------------------------------------------------------

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
            n_sublayers = 2 * self.dims.n_encoder_layers + 3 * self.dims.n_layers
        else:
            n_sublayers = 2 * self.dims.n_layers
        return InitScheme(self.init, n_residual_layers=n_sublayers)

    def position_dims(self, *, bidirectional: bool) -> PositionDims:
        return PositionDims(
            d_model=self.dims.d_model,
            n_heads=self.dims.n_heads,
            max_len=self.dims.max_len,
            bidirectional=bidirectional,
            init_std=self.init.std,
            dtype=self.compute_dtype,
            param_dtype=self.params_dtype,
        )

    def moe_spec(self) -> MoESpec | None:
        """The layer-level MoE settings (fine-grained sizes resolved), or None for a dense model."""
        return None if self.moe is None else self.moe.spec(self.dims.resolved_d_ff, self.ffn)

    def block_configs(self, *, side: str, rope: RopeSpec | None) -> tuple[BlockConfig, ...]:
        """One ``BlockConfig`` per layer of the ``side`` stack: the local layers of
        ``attention=local_global`` are sliding-window (with RoPE base ``position.local_theta``,
        unscaled, when set)."""
        n = self.dims.n_encoder_layers if side == "encoder" else self.dims.n_layers
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
            n_encoder_layers=self.dims.n_encoder_layers if self.kind == "encoder_decoder" else 0,
            n_decoder_layers=self.dims.n_layers,
            side=side,
        )
        return BlockConfig(
            dims=LayerDims(
                d_model=self.dims.d_model,
                n_heads=self.dims.n_heads,
                n_kv_heads=self.dims.resolved_kv_heads,
                head_dim=self.dims.resolved_head_dim,
                d_ff=self.dims.resolved_d_ff,
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


def _heads_split_d_model(m: ModelConfig) -> None:
    """A Transformer's heads split d_model (a baseline has no heads: ``ModelDims`` cannot say it)."""
    d = m.dims
    if d.head_dim is None and d.d_model % d.n_heads:
        fail(
            "model.dims.d_model",
            d.d_model,
            f"is not divisible by model.dims.n_heads={d.n_heads}",
            "change d_model or n_heads, or set model.dims.head_dim explicitly",
        )


def _encoder_layers(m: ModelConfig) -> None:
    n = m.dims.n_encoder_layers
    if m.kind == "encoder_decoder" and n < 1:
        fail("model.dims.n_encoder_layers", n, "an encoder_decoder needs at least 1 encoder layer")
    if m.kind != "encoder_decoder" and n:
        fail(
            "model.dims.n_encoder_layers",
            n,
            "is only used by kind='encoder_decoder'",
            "set it to 0 or change model.kind",
        )


def _position_fits(m: ModelConfig) -> None:
    kind = m.position.kind
    if kind == "rope" and m.dims.resolved_head_dim % 2:
        fail(
            "model.dims.head_dim",
            m.dims.resolved_head_dim,
            "RoPE rotates pairs of dimensions, so head_dim must be even",
            "change model.dims.d_model/n_heads or head_dim",
        )
    if kind == "sinusoidal" and m.dims.d_model % 2:
        fail("model.dims.d_model", m.dims.d_model, "sinusoidal positions need an even d_model")
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


def _yarn_mscale_all_dim_read(m: ModelConfig) -> None:
    scaling = getattr(m.position, "scaling", None)
    if not isinstance(scaling, YarnScaling) or scaling.mscale_all_dim is None or m.mla is not None:
        return
    if scaling.mscale is None or scaling.attention_factor is not None:
        fail(
            "model.position.scaling.mscale_all_dim",
            scaling.mscale_all_dim,
            "is read by model.mla's softmax scale, or with mscale and no attention_factor by the cos/sin factor; "
            "neither applies here",
            "unset it",
        )


def _local_global_unscanned(m: ModelConfig) -> None:
    if isinstance(m.attention, LocalGlobalAttention) and m.execution.scan_layers:
        fail(
            "model.execution.scan_layers",
            True,
            "a scan repeats one layer, but local_global alternates two kinds",
            "set model.execution.scan_layers=false",
        )


TRANSFORMER_RULES = (
    _heads_split_d_model,
    _encoder_layers,
    _position_fits,
    _yarn_mscale_all_dim_read,
    _local_global_unscanned,
)


# The groups whose field names `with_changes` takes directly.
_ROUTED = {
    "dims": DIMS_NAMES,
    "execution": frozenset(f.name for f in dataclasses.fields(ExecutionConfig)),
}


def with_changes(cfg: ModelConfig, **changes) -> ModelConfig:
    """``dataclasses.replace(cfg, **changes)``, except that the names of ``ModelDims``' fields
    (``d_model``, ``n_layers``...) replace those of ``cfg.dims`` and the names of ``ExecutionConfig``'s
    (``dtype``, ``scan_layers``...) those of ``cfg.execution``; a renamed field (``qk_norm``,
    ``init_std``...) is an error naming where it went."""
    routed = frozenset().union(*_ROUTED.values())
    for name in changes:
        moved = migration.renamed_key(f"model.{name}")
        if moved is not None and name not in routed:
            raise ConfigError(f"model field {name!r} was renamed: {moved} (CHANGELOG lists every renamed key)")
    for group, names in _ROUTED.items():
        fields = {k: changes.pop(k) for k in list(changes) if k in names}
        if fields:
            changes[group] = dataclasses.replace(changes.get(group, getattr(cfg, group)), **fields)
    return dataclasses.replace(cfg, **changes)
