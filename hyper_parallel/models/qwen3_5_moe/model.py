# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5-MoE: the Qwen3.5 hybrid decoder (:mod:`hyper_parallel.models.qwen3_5.model`) with every MLP a
``hyper_parallel.moe.MoE`` block plus a gated shared expert (``mlp.shared_experts``, its gate
``mlp.shared_experts.expert_gate``). Names follow Hugging Face's ``Qwen3_5MoeForCausalLM`` up to the stacked
experts and the per-section Gated DeltaNet tensors (see the adapter)."""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from hyper_parallel.models.qwen3_5.model import Qwen3_5ForCausalLM
from hyper_parallel.models.qwen3_5_moe.args import FLAVORS, Qwen3_5MoeConfig

__all__ = ["Qwen3_5MoeForCausalLM", "Qwen3_5MoeConfig", "FLAVORS"]


class Qwen3_5MoeForCausalLM(Qwen3_5ForCausalLM):
    """Qwen3.5-MoE text model + LM head; ``forward(input_ids, position_ids=None, attention_mask=None)`` returns
    logits ``[batch, seq, vocab]``."""

    config_cls = Qwen3_5MoeConfig
