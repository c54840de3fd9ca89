# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5-MoE configuration and flavor table (pure Python: no framework import).

Qwen3.5's hybrid decoder (:mod:`hyper_parallel.models.qwen3_5.args`) with every MLP a ``hyper_parallel.moe``
block: softmax router over ``num_experts``, top ``num_experts_per_tok``, the selected weights renormalised,
auxiliary load-balancing loss (``router_aux_loss_coef``), plus one shared SwiGLU expert of width
``shared_expert_intermediate_size`` scaled per token by ``sigmoid(shared_expert_gate(x))``.
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from dataclasses import dataclass
from typing import Dict

from hyper_parallel.models.qwen3_5.args import Qwen3_5Config
from hyper_parallel.moe import MoEConfig

__all__ = ["Qwen3_5MoeConfig", "FLAVORS", "qwen3_5_moe_layer"]


def qwen3_5_moe_layer(hidden_size: int, moe_intermediate_size: int, num_experts: int, top_k: int,
                      aux_loss_coeff: float = 1e-3) -> MoEConfig:
    """The routed part of a Qwen3.5-MoE layer (Hugging Face's ``moe_intermediate_size``, ``num_experts``,
    ``num_experts_per_tok``, ``router_aux_loss_coef``; the weights are always renormalised)."""
    return MoEConfig(num_experts=num_experts, top_k=top_k, dim=hidden_size, hidden_dim=moe_intermediate_size,
                     score_func="softmax", route_norm=True, load_balance="aux_loss", aux_loss_coeff=aux_loss_coeff)


@dataclass(frozen=True)
class Qwen3_5MoeConfig(Qwen3_5Config):
    """A Qwen3.5 config whose ``moe`` is required (:func:`qwen3_5_moe_layer`); defaults: Hugging Face's
    ``Qwen3_5MoeTextConfig()``. ``intermediate_size`` is unused (every layer is MoE)."""

    hidden_size: int = 2048
    num_hidden_layers: int = 40
    num_key_value_heads: int = 2
    intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512

    def __post_init__(self) -> None:
        if self.moe is None:
            object.__setattr__(self, "moe", qwen3_5_moe_layer(self.hidden_size, 512, 256, 8))
        super().__post_init__()
        if self.moe.num_shared_experts or self.moe.score_func != "softmax" or not self.moe.route_norm:
            raise ValueError(f"{type(self).__name__}(moe): Qwen3.5-MoE routes by softmax with renormalised weights "
                             f"and a gated shared expert (shared_expert_intermediate_size), got score_func="
                             f"{self.moe.score_func!r}, route_norm={self.moe.route_norm}, num_shared_experts="
                             f"{self.moe.num_shared_experts}")
        if isinstance(self.shared_expert_intermediate_size, bool) or self.shared_expert_intermediate_size < 0:
            raise ValueError(f"{type(self).__name__}(shared_expert_intermediate_size): expected an int >= 0, got "
                             f"{self.shared_expert_intermediate_size!r}")


_REAL = {"vocab_size": 248320, "head_dim": 256, "max_position_embeddings": 262144, "rope_theta": 10000000.0}

#: ``debug_moe`` (alias ``debug``: every layer kind, 4 experts) runs on CPU in seconds; ``35B-A3B`` is
#: Qwen/Qwen3.5-35B-A3B's text model; ``hf_default`` is ``Qwen3_5MoeTextConfig()``. The published sizes are
#: for meta-device construction and estimates only.
FLAVORS: Dict[str, Qwen3_5MoeConfig] = {
    "debug_moe": Qwen3_5MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                  max_position_embeddings=256,
                                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                                  linear_value_head_dim=16, partial_rotary_factor=0.5, mrope_section=(3, 3, 2),
                                  full_attention_interval=2, chunk_size=8, shared_expert_intermediate_size=48,
                                  moe=qwen3_5_moe_layer(64, 32, num_experts=4, top_k=2)),
    "35B-A3B": Qwen3_5MoeConfig(hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2,
                                linear_num_key_heads=16, linear_num_value_heads=32,
                                moe=qwen3_5_moe_layer(2048, 512, num_experts=256, top_k=8), **_REAL),
    "hf_default": Qwen3_5MoeConfig(),
}
FLAVORS["debug"] = FLAVORS["debug_moe"]
