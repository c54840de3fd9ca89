# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama 3 configuration and flavor table (pure Python: no framework import)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from hyper_parallel.moe import MoEConfig

__all__ = ["LlamaConfig", "TINY_CONFIGS"]


@dataclass(frozen=True)
class LlamaConfig:
    """Model size. ``TINY_CONFIGS['debug']`` runs a training step in well under a second on CPU."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 128
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    moe: Optional[MoEConfig] = None
    first_k_dense_layers: int = 0

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` uses the MoE block."""
        return self.moe is not None and index >= self.first_k_dense_layers

    @property
    def head_dim(self) -> int:
        """Per-head size."""
        return self.hidden_size // self.num_attention_heads

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"LlamaConfig: hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("LlamaConfig: num_attention_heads must be a multiple of num_key_value_heads")
        if self.moe is not None and self.moe.dim != self.hidden_size:
            raise ValueError(f"LlamaConfig: moe.dim={self.moe.dim} must equal hidden_size={self.hidden_size}")


TINY_CONFIGS: Dict[str, LlamaConfig] = {
    "debug": LlamaConfig(),
    "small": LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4),
    # layer 0 dense, layers 1-2 MoE: 4 routed experts (top-2) + 1 shared, auxiliary-loss-free balancing
    "debug_moe": LlamaConfig(num_hidden_layers=3, first_k_dense_layers=1,
                             moe=MoEConfig(num_experts=4, top_k=2, dim=64, hidden_dim=32, num_shared_experts=1,
                                           load_balance="expert_bias")),
}
