# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama 3 configuration and flavor table (pure Python: no framework import)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from hyper_parallel.moe import MoEConfig

__all__ = ["LlamaConfig", "TINY_CONFIGS", "FLAVORS", "HIDDEN_ACTS"]

#: ``hidden_act`` values and their meaning (transformers' ``ACT2FN`` names): the gate activation of the MLP
HIDDEN_ACTS = {"silu": "x * sigmoid(x)", "swish": "silu", "gelu": "exact (erf) GELU",
               "gelu_pytorch_tanh": "tanh-approximate GELU", "gelu_new": "tanh-approximate GELU",
               "relu": "max(x, 0)"}


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
    #: per-head size; 0 = ``hidden_size // num_attention_heads`` (filled in on construction)
    head_dim: int = 0
    #: RMSNorm on each query and key head before RoPE (Qwen3)
    qk_norm: bool = False
    #: ``"default"`` or ``"llama3"`` (Llama 3.1 long-context frequency scaling with the three fields below)
    rope_type: str = "default"
    rope_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position_embeddings: int = 8192
    #: the dense MLP's gate activation (Hugging Face ``hidden_act``; see ``HIDDEN_ACTS``)
    hidden_act: str = "silu"

    #: the RoPE variants this config family supports (a class attribute, not a field)
    rope_types = ("default", "llama3")

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` uses the MoE block."""
        return self.moe is not None and index >= self.first_k_dense_layers

    def __post_init__(self) -> None:
        name = type(self).__name__
        for field_name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "num_key_value_heads"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}({field_name}): expected a positive int, got {value!r}")
        if not self.head_dim:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"{name}: hidden_size {self.hidden_size} is not divisible by "
                                 f"num_attention_heads {self.num_attention_heads} (or give head_dim)")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
            object.__setattr__(self, "head_dim_derived", True)  # not a field: ModelSpec.config re-derives it
        if self.head_dim % 2:
            raise ValueError(f"{name}: head_dim={self.head_dim} must be even (rotary embeddings rotate pairs)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{name}: num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        if self.rope_type not in self.rope_types:
            raise ValueError(f"{name}(rope_type): expected one of {self.rope_types}, got {self.rope_type!r}")
        if self.hidden_act not in HIDDEN_ACTS:
            raise ValueError(f"{name}(hidden_act): expected one of {sorted(HIDDEN_ACTS)}, got {self.hidden_act!r}")
        if self.moe is not None and self.hidden_act not in ("silu", "swish"):
            raise ValueError(f"{name}(hidden_act): {self.hidden_act!r} with MoE layers: the experts compute SwiGLU "
                             f"(silu) only")
        if self.moe is not None and self.moe.dim != self.hidden_size:
            raise ValueError(f"LlamaConfig: moe.dim={self.moe.dim} must equal hidden_size={self.hidden_size}")


_LLAMA31 = {"vocab_size": 128256, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
            "rope_type": "llama3"}

#: every flavor: ``debug``/``small``/``debug_moe`` run on CPU; the published sizes (Llama 3.1) are for
#: meta-device construction and estimates only
TINY_CONFIGS: Dict[str, LlamaConfig] = {
    "debug": LlamaConfig(),
    "small": LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4),
    # layer 0 dense, layers 1-2 MoE: 4 routed experts (top-2) + 1 shared, auxiliary-loss-free balancing
    "debug_moe": LlamaConfig(num_hidden_layers=3, first_k_dense_layers=1,
                             moe=MoEConfig(num_experts=4, top_k=2, dim=64, hidden_dim=32, num_shared_experts=1,
                                           load_balance="expert_bias")),
    "debug_rope_llama3": LlamaConfig(rope_type="llama3", rope_factor=4.0, rope_original_max_position_embeddings=32),
    "8B": LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, **_LLAMA31),
    "70B": LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                       num_key_value_heads=8, **_LLAMA31),
    "405B": LlamaConfig(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126, num_attention_heads=128,
                        num_key_value_heads=8, **_LLAMA31),
}
#: the flavor table under its layout name (``TINY_CONFIGS`` is the historical name)
FLAVORS = TINY_CONFIGS
