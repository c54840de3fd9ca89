# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE on MindSpore: Qwen3 attention with ``hyper_parallel.moe._mindspore.MoE`` blocks (softmax routing,
renormalised top-k, the batch-level auxiliary loss) as the MLPs from ``first_k_dense_layers`` on."""
from __future__ import annotations

from hyper_parallel.models.llama3._mindspore.model import LlamaForCausalLM
from hyper_parallel.models.qwen3_moe.args import FLAVORS, Qwen3MoeConfig

__all__ = ["Qwen3MoeForCausalLM", "Qwen3MoeConfig", "FLAVORS"]


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3-MoE decoder + LM head; ``construct(input_ids, position_ids=None)`` returns logits."""

    def __init__(self, config: Qwen3MoeConfig, seed: int = 0) -> None:
        if not isinstance(config, Qwen3MoeConfig):
            raise TypeError(f"Qwen3MoeForCausalLM(config): expected a Qwen3MoeConfig, got {type(config).__name__}")
        super().__init__(config, seed=seed)
