# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense): the Llama decoder of ``hyper_parallel.models.llama3`` with ``qk_norm`` (a per-head
RMSNorm ``self_attn.q_norm`` / ``self_attn.k_norm`` before RoPE), an explicit ``head_dim`` and tied
embeddings for the small sizes. Parameter names are Hugging Face's ``Qwen3ForCausalLM``."""
from __future__ import annotations

from hyper_parallel.models.llama3.model import LlamaForCausalLM
from hyper_parallel.models.qwen3.args import FLAVORS, Qwen3Config

__all__ = ["Qwen3ForCausalLM", "Qwen3Config", "FLAVORS"]


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3 decoder + LM head; ``forward(input_ids, position_ids=None, attention_mask=None)`` returns
    logits ``[batch, seq, vocab]`` (the module tree is :class:`LlamaForCausalLM`'s, driven by
    :class:`Qwen3Config`)."""

    def __init__(self, config: Qwen3Config) -> None:
        if not isinstance(config, Qwen3Config):
            raise TypeError(f"Qwen3ForCausalLM(config): expected a Qwen3Config, got {type(config).__name__}")
        super().__init__(config)
