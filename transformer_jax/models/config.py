"""``ModelConfig``: every architectural choice of the zoo, frozen and validated on construction."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import check_choice, check_positive, check_range, check_types, fail
from transformer_jax.core.dtypes import DTYPES
from transformer_jax.models.baselines.config import BaselineConfig
from transformer_jax.models.kinds import MODELS, TRANSFORMER_KINDS
from transformer_jax.models.layer_pattern import ATTENTION_PATTERNS, layer_types
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.nn.attention import AttentionSpec, RopeSpec
from transformer_jax.nn.block import BlockConfig
from transformer_jax.nn.init import INIT_SCHEMES, InitScheme
from transformer_jax.nn.moe import MoESpec
from transformer_jax.nn.positions import POSITIONS, PositionArgs
from transformer_jax.nn.stack import REMAT_POLICIES
from transformer_jax.ops import activations, norms, residual
from transformer_jax.ops import attention as attention_ops
from transformer_jax.ops import rope as rope_ops
from transformer_jax.ops.decode_attention import DECODE_BLOCK_SIZE, DECODE_IMPLS

_BIAS_POSITIONS = ("relative_bias", "alibi")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a ``DecoderLM`` or ``EncoderDecoder`` (``kind``).

    Variants are chosen by name from registries: ``placement`` (ops.residual.PLACEMENTS),
    ``norm`` (ops.norms.NORMS), ``position`` (nn.positions.POSITIONS), ``ffn``
    (ops.activations.FFN_ACTIVATIONS), ``attention_kind``/``attention_impl`` (ops.attention),
    ``rope_scaling`` (ops.rope.ROPE_SCALINGS), ``init`` (nn.init.INIT_SCHEMES), ``remat``
    (nn.stack.REMAT_POLICIES), ``attention_pattern`` (models.layer_pattern.ATTENTION_PATTERNS).

    Speedrun / Gemma pieces: ``qk_norm`` (norm q and k over head_dim with ``norm``), ``attn_softcap``
    and ``final_softcap`` (cap * tanh(x / cap) on attention / output logits), ``zero_init_out``
    (residual output projections start at 0), ``qkv_bias`` (biases on q/k/v only; None: use_bias).
    """

    kind: str = "decoder_lm"
    vocab_size: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: as many as n_heads (MHA); 1: MQA; else GQA
    head_dim: int | None = None  # None: d_model // n_heads
    d_ff: int | None = None  # None: 4 * d_model
    n_layers: int = 4  # decoder layers (the whole DecoderLM, or the decoder of EncoderDecoder)
    n_encoder_layers: int = 0  # EncoderDecoder only
    max_len: int = 1024  # longest sequence (size of a learned position table)
    placement: str = "pre"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True
    position: str = "learned"
    rope_theta: float = 10000.0
    rope_pairing: str = "split"
    rope_scaling: str = "none"
    rope_scaling_factor: float = 1.0
    rope_original_max_len: int = 2048
    rope_low_freq_factor: float = 1.0  # rope_scaling="llama3"
    rope_high_freq_factor: float = 4.0  # rope_scaling="llama3"
    rope_local_theta: float | None = None  # attention_pattern="local_global": RoPE base of local layers
    relative_buckets: int = 32
    relative_max_distance: int = 128
    ffn: str = "gelu"
    use_bias: bool = True
    qkv_bias: bool | None = None
    tie_embeddings: bool = True
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model) (Vaswani et al.)
    share_embeddings: bool = True  # EncoderDecoder: one table for source and target tokens
    dropout: float = 0.0
    attention_kind: str = "softmax"
    attention_impl: str = "xla"
    attention_window: int | None = None
    attention_block_size: int = 512
    attention_scale: float | None = None  # None: 1/sqrt(head_dim)
    attention_pattern: str = "uniform"
    attention_global_every: int = 2
    attention_local_window: int | None = None  # attention_pattern="local_global": the local layers' window
    attn_softcap: float | None = None
    final_softcap: float | None = None
    qk_norm: bool = False
    decode_impl: str = "auto"  # attention over the KV cache (ops.decode_attention.DECODE_IMPLS)
    decode_block_size: int = DECODE_BLOCK_SIZE
    causal: bool = True  # decoder self-attention mask (False only for ablations)
    init: str = "normal"
    init_std: float = 0.02
    zero_init_out: bool = False
    scan_layers: bool = False
    remat: str = "none"
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    moe: MoEConfig | None = None  # Mixture-of-Experts in place of the FFN (None: dense)
    mla: MLAConfig | None = None  # Multi-head Latent Attention in place of MHA/GQA (None: off)
    mtp: MTPConfig | None = None  # multi-token prediction modules (models.mtp_config; None: off)
    baseline: BaselineConfig | None = None  # settings of the classic LMs (n-gram, window, RNN)

    SELECTORS: ClassVar = (
        ("kind", MODELS),
        ("position", POSITIONS),
        ("rope_scaling", rope_ops.ROPE_SCALINGS),
        ("attention_kind", attention_ops.ATTENTION_KINDS),
        ("attention_impl", attention_ops.ATTENTION_IMPLS),
        ("decode_impl", DECODE_IMPLS),
        ("attention_pattern", ATTENTION_PATTERNS),
    )

    def __post_init__(self):
        check_types(self, "model")
        check_choice("model.kind", self.kind, MODELS)
        if self.kind not in TRANSFORMER_KINDS:
            if self.baseline is None:
                fail("model.baseline", None, f"model.kind={self.kind!r} needs its settings in model.baseline")
            self.baseline.validate(self)
            return
        self._check_transformer()

    def _check_transformer(self):
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            check_positive(f"model.{name}", getattr(self, name))
        if self.vocab_size < 2:
            fail("model.vocab_size", self.vocab_size, "must be at least 2")
        if self.head_dim is None and self.d_model % self.n_heads:
            fail(
                "model.d_model",
                self.d_model,
                f"is not divisible by n_heads={self.n_heads}",
                "change d_model or n_heads, or set head_dim explicitly",
            )
        if self.head_dim is not None:
            check_positive("model.head_dim", self.head_dim)
        if self.n_kv_heads is not None:
            check_positive("model.n_kv_heads", self.n_kv_heads)
            if self.n_heads % self.n_kv_heads:
                fail(
                    "model.n_kv_heads",
                    self.n_kv_heads,
                    f"does not divide n_heads={self.n_heads}",
                    "use a divisor of n_heads (1 = multi-query attention)",
                )
        if self.d_ff is not None:
            check_positive("model.d_ff", self.d_ff)
        if self.kind == "encoder_decoder" and self.n_encoder_layers < 1:
            fail("model.n_encoder_layers", self.n_encoder_layers, "an encoder_decoder needs at least 1 encoder layer")
        if self.kind != "encoder_decoder" and self.n_encoder_layers:
            fail(
                "model.n_encoder_layers",
                self.n_encoder_layers,
                "is only used by kind='encoder_decoder'",
                "set it to 0 or change model.kind",
            )
        check_choice("model.placement", self.placement, residual.PLACEMENTS, "norm placement")
        check_choice("model.norm", self.norm, norms.NORMS)
        check_positive("model.norm_eps", self.norm_eps)
        check_choice("model.position", self.position, POSITIONS, "position encoding")
        check_choice("model.ffn", self.ffn, activations.FFN_ACTIVATIONS, "feed-forward kind")
        check_choice("model.attention_kind", self.attention_kind, attention_ops.ATTENTION_KINDS, "attention kind")
        check_choice(
            "model.attention_impl", self.attention_impl, attention_ops.ATTENTION_IMPLS, "attention implementation"
        )
        check_choice("model.rope_scaling", self.rope_scaling, rope_ops.ROPE_SCALINGS, "RoPE scaling")
        check_choice("model.rope_pairing", self.rope_pairing, rope_ops.ROPE_PAIRINGS, "RoPE pairing")
        check_choice("model.init", self.init, INIT_SCHEMES, "init scheme")
        check_choice("model.remat", self.remat, REMAT_POLICIES, "remat policy")
        check_choice("model.dtype", self.dtype, DTYPES, "dtype")
        check_choice("model.param_dtype", self.param_dtype, DTYPES, "dtype")
        check_range("model.dropout", self.dropout, 0.0, 1.0)
        check_positive("model.init_std", self.init_std)
        check_positive("model.attention_block_size", self.attention_block_size)
        check_choice("model.decode_impl", self.decode_impl, DECODE_IMPLS, "decode attention implementation")
        check_positive("model.decode_block_size", self.decode_block_size)
        if self.position == "rope" and self.resolved_head_dim % 2:
            fail(
                "model.head_dim",
                self.resolved_head_dim,
                "RoPE rotates pairs of dimensions, so head_dim must be even",
                "change d_model/n_heads or head_dim",
            )
        if self.position == "sinusoidal" and self.d_model % 2:
            fail("model.d_model", self.d_model, "sinusoidal positions need an even d_model")
        if self.rope_scaling_factor < 1:
            fail("model.rope_scaling_factor", self.rope_scaling_factor, "must be >= 1 (1 = no scaling)")
        if self.attention_kind == "sliding_window" and (self.attention_window is None or self.attention_window < 1):
            fail(
                "model.attention_window",
                self.attention_window,
                "attention_kind='sliding_window' needs a window",
                "set model.attention_window to a positive number of tokens",
            )
        if self.attention_window is not None and self.attention_window < 1:
            fail("model.attention_window", self.attention_window, "must be a positive number of tokens or None")
        if self.attention_kind == "linear" and self.position in _BIAS_POSITIONS:
            fail(
                "model.position",
                self.position,
                "linear attention cannot add a bias to attention logits",
                "use rope, sinusoidal, learned or none with attention_kind='linear'",
            )
        if self.attention_kind == "linear" and self.attention_window is not None:
            fail("model.attention_window", self.attention_window, "linear attention has no window")
        if self.attention_scale is not None and self.attention_scale <= 0:
            fail("model.attention_scale", self.attention_scale, "must be positive (or None for 1/sqrt(head_dim))")
        self._check_gemma_pieces()
        for group in (self.moe, self.mla):
            if group is not None:
                group.validate(self)
        if self.mtp is not None:
            self.mtp.validate(self)

    def _check_gemma_pieces(self):
        check_choice("model.attention_pattern", self.attention_pattern, ATTENTION_PATTERNS, "attention pattern")
        check_positive("model.attention_global_every", self.attention_global_every)
        for name in ("attn_softcap", "final_softcap", "rope_local_theta"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                fail(f"model.{name}", getattr(self, name), "must be positive (or None: off)")
        if self.attention_pattern == "local_global":
            if self.attention_kind != "softmax":
                fail(
                    "model.attention_kind",
                    self.attention_kind,
                    "attention_pattern='local_global' sets each layer's kind itself",
                    "use attention_kind='softmax'",
                )
            if self.attention_local_window is None or self.attention_local_window < 1:
                fail(
                    "model.attention_local_window",
                    self.attention_local_window,
                    "attention_pattern='local_global' needs the local layers' window",
                    "set model.attention_local_window to a positive number of tokens",
                )
            if self.scan_layers:
                fail(
                    "model.scan_layers",
                    True,
                    "a scan repeats one layer, but local_global alternates two kinds",
                    "set scan_layers=False",
                )
        if self.rope_local_theta is not None and self.position != "rope":
            fail("model.rope_local_theta", self.rope_local_theta, "is a RoPE base", "use position='rope' or unset it")
        if self.attention_kind == "linear" and (self.attn_softcap is not None or self.qk_norm):
            fail("model.attention_kind", "linear", "linear attention has no logits to soft-cap or QK-norm")

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
        return DTYPES.get(self.dtype)

    @property
    def params_dtype(self):
        return DTYPES.get(self.param_dtype)

    def architecture(self) -> str:
        return "encoder_decoder" if self.kind == "encoder_decoder" else "decoder_only"

    def init_scheme(self) -> InitScheme:
        """GPT-2 scales residual output projections by 1/sqrt(number of residual sublayers)."""
        if self.kind == "encoder_decoder":
            n_sublayers = 2 * self.n_encoder_layers + 3 * self.n_layers
        else:
            n_sublayers = 2 * self.n_layers
        return InitScheme(name=self.init, std=self.init_std, n_residual_layers=n_sublayers, zero_out=self.zero_init_out)

    def rope_spec(self) -> RopeSpec:
        scaling = rope_ops.RopeScaling(
            kind=self.rope_scaling,
            factor=self.rope_scaling_factor,
            original_max_len=self.rope_original_max_len,
            low_freq_factor=self.rope_low_freq_factor,
            high_freq_factor=self.rope_high_freq_factor,
        )
        return RopeSpec(
            theta=self.rope_theta, pairing=self.rope_pairing, scaling=None if self.rope_scaling == "none" else scaling
        )

    def position_args(self, *, bidirectional: bool) -> PositionArgs:
        rope = self.rope_spec()
        return PositionArgs(
            d_model=self.d_model,
            n_heads=self.n_heads,
            max_len=self.max_len,
            bidirectional=bidirectional,
            rope_theta=rope.theta,
            rope_pairing=rope.pairing,
            rope_scaling=rope.scaling,
            num_buckets=self.relative_buckets,
            max_distance=self.relative_max_distance,
            init_std=self.init_std,
            dtype=self.compute_dtype,
            param_dtype=self.params_dtype,
        )

    def moe_spec(self) -> MoESpec | None:
        """The layer-level MoE settings (fine-grained sizes resolved), or None for a dense model."""
        return None if self.moe is None else self.moe.spec(self.resolved_d_ff, self.ffn)

    def block_configs(self, *, side: str, rope: RopeSpec | None) -> tuple[BlockConfig, ...]:
        """One ``BlockConfig`` per layer of the ``side`` stack: ``attention_pattern`` makes local
        layers sliding-window (with ``rope_local_theta``'s RoPE, unscaled, when set)."""
        base = self.block_config(side=side, rope=rope)
        n = self.n_encoder_layers if side == "encoder" else self.n_layers
        local_rope = rope
        if rope is not None and self.rope_local_theta is not None:
            local_rope = dataclasses.replace(rope, theta=self.rope_local_theta, scaling=None)
        local = dataclasses.replace(
            base,
            attention=dataclasses.replace(base.attention, kind="sliding_window", window=self.attention_local_window),
            rope=local_rope,
        )
        types = layer_types(self.attention_pattern, n, self.attention_global_every)
        return tuple(local if t == "local" else base for t in types)

    def block_config(self, *, side: str, rope: RopeSpec | None) -> BlockConfig:
        """The layer hyperparameters of the ``side`` ("encoder" or "decoder") stack."""
        placement = residual.PLACEMENTS.get(self.placement)
        alpha, beta = placement.constants(
            architecture=self.architecture(),
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_layers,
            side=side,
        )
        window = self.attention_window if self.attention_kind == "sliding_window" else None
        return BlockConfig(
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_kv_heads=self.resolved_kv_heads,
            head_dim=self.resolved_head_dim,
            d_ff=self.resolved_d_ff,
            ffn=self.ffn,
            use_bias=self.use_bias,
            qkv_bias=self.qkv_bias,
            norm=self.norm,
            norm_eps=self.norm_eps,
            norm_bias=self.norm_bias,
            placement=self.placement,
            alpha=alpha,
            beta=beta,
            dropout=self.dropout,
            attention=AttentionSpec(
                kind=self.attention_kind,
                impl=self.attention_impl,
                window=window,
                block_size=self.attention_block_size,
                scale=self.attention_scale,
                decode_impl=self.decode_impl,
                decode_block_size=self.decode_block_size,
                softcap=self.attn_softcap,
                qk_norm=self.norm if self.qk_norm else None,
                qk_norm_eps=self.norm_eps,
            ),
            rope=rope,
            cross=(side == "decoder" and self.kind == "encoder_decoder"),
            init=self.init_scheme(),
            dtype=self.compute_dtype,
            param_dtype=self.params_dtype,
            moe=self.moe_spec(),
            mla=self.mla,
            moe_every=1 if self.moe is None else self.moe.every,
            moe_first_dense=0 if self.moe is None else self.moe.first_dense,
        )
