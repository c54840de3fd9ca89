# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE: Qwen3 attention with ``hyper_parallel.moe.MoE`` blocks as the MLPs (from
``first_k_dense_layers`` on; Hugging Face's ``mlp_only_layers``). Parameter names follow
``Qwen3MoeForCausalLM`` up to the stacked experts (see the state-dict adapter)."""
from __future__ import annotations

from hyper_parallel.models.llama3.model import LlamaForCausalLM
from hyper_parallel.models.qwen3_moe.args import FLAVORS, Qwen3MoeConfig

__all__ = ["Qwen3MoeForCausalLM", "Qwen3MoeConfig", "FLAVORS"]


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3-MoE decoder + LM head; ``forward(input_ids, position_ids=None, attention_mask=None)`` returns
    logits ``[batch, seq, vocab]``."""

    def __init__(self, config: Qwen3MoeConfig) -> None:
        if not isinstance(config, Qwen3MoeConfig):
            raise TypeError(f"Qwen3MoeForCausalLM(config): expected a Qwen3MoeConfig, got {type(config).__name__}")
        super().__init__(config)
