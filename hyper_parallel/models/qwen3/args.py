# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense) configuration and flavor table (pure Python: no framework import).

Qwen3 is the Llama block with a per-head RMSNorm on queries and keys (``qk_norm``), an explicit
``head_dim`` (128 in the published sizes, not ``hidden_size / heads``), RoPE θ = 1e6 and tied
embeddings for the small sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from hyper_parallel.models.llama3.args import LlamaConfig

__all__ = ["Qwen3Config", "FLAVORS"]


@dataclass(frozen=True)
class Qwen3Config(LlamaConfig):
    """A :class:`~hyper_parallel.models.llama3.args.LlamaConfig` with Qwen3's defaults."""

    qk_norm: bool = True
    rope_theta: float = 1000000.0
    tie_word_embeddings: bool = True


_REAL = {"vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960, "num_key_value_heads": 8}

#: ``debug``/``small`` run on CPU; the published sizes are for meta-device construction only
FLAVORS: Dict[str, Qwen3Config] = {
    "debug": Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128),
    "small": Qwen3Config(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512),
    "0.6B": Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                        **_REAL),
    "1.7B": Qwen3Config(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                        **_REAL),
    "4B": Qwen3Config(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32, **_REAL),
    "8B": Qwen3Config(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                      tie_word_embeddings=False, **_REAL),
    "14B": Qwen3Config(hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
                       tie_word_embeddings=False, **_REAL),
    "32B": Qwen3Config(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64, num_attention_heads=64,
                       tie_word_embeddings=False, **_REAL),
}
