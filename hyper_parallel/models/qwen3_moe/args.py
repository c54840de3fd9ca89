# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE configuration and flavor table (pure Python: no framework import).

Qwen3 attention (QK-norm, GQA) with every decoder layer's MLP a ``hyper_parallel.moe`` block: router
softmax over all experts, top-k, the k weights renormalised (``norm_topk_prob`` -> ``route_norm``), no
shared experts, auxiliary load-balancing loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from hyper_parallel.models.qwen3.args import Qwen3Config
from hyper_parallel.moe import MoEConfig

__all__ = ["Qwen3MoeConfig", "FLAVORS", "qwen3_moe_layer"]


@dataclass(frozen=True)
class Qwen3MoeConfig(Qwen3Config):
    """A Qwen3 config whose ``moe`` field is required (build it with :func:`qwen3_moe_layer`)."""

    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.moe is None:
            raise ValueError("Qwen3MoeConfig(moe): a MoEConfig is required (see qwen3_moe_layer)")
        if self.moe.num_shared_experts or self.moe.score_func != "softmax":
            raise ValueError(f"Qwen3MoeConfig(moe): Qwen3-MoE routes by softmax without shared experts, got "
                             f"score_func={self.moe.score_func!r}, num_shared_experts={self.moe.num_shared_experts}")


def qwen3_moe_layer(hidden_size: int, moe_intermediate_size: int, num_experts: int, top_k: int,
                    norm_topk_prob: bool = True, aux_loss_coeff: float = 1e-3) -> MoEConfig:
    """The ``MoEConfig`` of a Qwen3-MoE layer (Hugging Face's ``moe_intermediate_size``, ``num_experts``,
    ``num_experts_per_tok``, ``norm_topk_prob``, ``router_aux_loss_coef``)."""
    return MoEConfig(num_experts=num_experts, top_k=top_k, dim=hidden_size, hidden_dim=moe_intermediate_size,
                     score_func="softmax", route_norm=norm_topk_prob, load_balance="aux_loss",
                     aux_loss_coeff=aux_loss_coeff)


_REAL = {"vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960, "num_key_value_heads": 4}

#: ``debug``/``small`` run on CPU; the published sizes are for meta-device construction only
FLAVORS: Dict[str, Qwen3MoeConfig] = {
    "debug": Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                            moe=qwen3_moe_layer(64, 32, num_experts=4, top_k=2)),
    "small": Qwen3MoeConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                            num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=512,
                            moe=qwen3_moe_layer(256, 128, num_experts=8, top_k=2)),
    "30B-A3B": Qwen3MoeConfig(hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
                              moe=qwen3_moe_layer(2048, 768, num_experts=128, top_k=8), **_REAL),
    "235B-A22B": Qwen3MoeConfig(hidden_size=4096, intermediate_size=12288, num_hidden_layers=94,
                                num_attention_heads=64, moe=qwen3_moe_layer(4096, 1536, num_experts=128, top_k=8),
                                **_REAL),
}
