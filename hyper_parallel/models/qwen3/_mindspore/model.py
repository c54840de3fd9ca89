# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense) on MindSpore: the MindSpore Llama decoder with ``qk_norm``, an explicit ``head_dim`` and tied
embeddings (the torch ``Qwen3ForCausalLM``'s module tree and names)."""
from __future__ import annotations

from hyper_parallel.models.llama3._mindspore.model import LlamaForCausalLM
from hyper_parallel.models.qwen3.args import FLAVORS, Qwen3Config

__all__ = ["Qwen3ForCausalLM", "Qwen3Config", "FLAVORS"]


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3 decoder + LM head; ``construct(input_ids, position_ids=None)`` returns logits."""

    def __init__(self, config: Qwen3Config, seed: int = 0) -> None:
        if not isinstance(config, Qwen3Config):
            raise TypeError(f"Qwen3ForCausalLM(config): expected a Qwen3Config, got {type(config).__name__}")
        super().__init__(config, seed=seed)
