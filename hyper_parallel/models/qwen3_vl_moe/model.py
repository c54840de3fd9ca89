# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL-MoE on torch: :class:`~hyper_parallel.models.qwen3_vl.model.Qwen3VLForConditionalGeneration` whose
decoder layers' MLPs are ``hyper_parallel.moe.MoE`` blocks (the Llama decoder layer builds them from
``config.text.moe``). Parameter names are Hugging Face's ``Qwen3VLMoeForConditionalGeneration`` up to the
router (``mlp.router.gate``) and the stacked experts (see the state-dict adapter)."""
from __future__ import annotations

from hyper_parallel.models.qwen3_vl.model import Qwen3VLForConditionalGeneration
from hyper_parallel.models.qwen3_vl_moe.args import FLAVORS, Qwen3VLMoeConfig

__all__ = ["Qwen3VLMoeForConditionalGeneration", "Qwen3VLMoeConfig", "FLAVORS"]


class Qwen3VLMoeForConditionalGeneration(Qwen3VLForConditionalGeneration):
    """Qwen3-VL-MoE with its LM head; ``forward`` as :class:`Qwen3VLForConditionalGeneration`."""

    def __init__(self, config: Qwen3VLMoeConfig) -> None:
        if not isinstance(config, Qwen3VLMoeConfig):
            raise TypeError(f"Qwen3VLMoeForConditionalGeneration(config): expected a Qwen3VLMoeConfig, got "
                            f"{type(config).__name__}")
        super().__init__(config)
