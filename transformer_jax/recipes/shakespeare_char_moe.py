"""``shakespeare_char`` with Mixture-of-Experts FFNs at the dense model's ACTIVE parameter count.

The dense baseline (recipe ``shakespeare_char``) has FFNs of width 512. Here every layer
has 8 GELU experts of width 256, top-2 (GShard-style: renormalised gates, Switch/GShard balance
loss 0.01), dropless: 2 x 256 = 512 active hidden units per token, 4x the FFN parameters.

DeepSeekMoE-style at the same active parameters (each expert split in 4, one of the 32 shared:
1 shared + top-7 of 31 routed experts of width 64, expert-level balance loss)::

    python -m transformer_jax train --config shakespeare_char_moe --workdir /tmp/moe_ds \\
        --set model.moe.segments=4 model.moe.n_shared=1 model.moe.router.renormalize=false \\
              model.moe.balance.loss=expert

Other knobs: ``model.moe.capacity=on`` (token dropping, ``model.moe.capacity.factor=1.25``),
``model.moe.dispatch=ragged``, ``model.moe.router.bias_update_rate=1e-3`` (auxiliary-loss-free
balancing), ``model.moe.every=2``, and
``mesh.expert=N model.moe.dispatch=expert_parallel`` (experts sharded over N devices).
"""

import dataclasses

from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import BalanceLossConfig, SoftmaxRouter
from transformer_jax.recipes.shakespeare_char import get_config as base_config


def get_config():
    cfg = base_config()
    moe = MoEConfig(
        n_experts=8,
        top_k=2,
        d_expert=256,
        router=SoftmaxRouter(renormalize=True),
        balance=BalanceLossConfig(loss="switch", coef=0.01),
    )
    return dataclasses.replace(cfg, name="shakespeare_char_moe", model=dataclasses.replace(cfg.model, moe=moe))
