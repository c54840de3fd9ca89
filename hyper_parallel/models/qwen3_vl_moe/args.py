# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL-MoE configuration (pure Python: no framework import).

Qwen3-VL's vision tower and MRoPE decoder with DeepStack (:mod:`hyper_parallel.models.qwen3_vl.args`), the
decoder's MLPs ``hyper_parallel.moe`` blocks as in Qwen3-MoE: router softmax over all experts, top-k, the k
weights renormalised (Hugging Face's ``Qwen3VLMoeTextTopKRouter`` always renormalises), no shared experts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from hyper_parallel.models.qwen3_moe.args import Qwen3MoeConfig, qwen3_moe_layer
from hyper_parallel.models.qwen3_vl.args import _DEBUG_VISION, Qwen3VLConfig, Qwen3VLVisionConfig

__all__ = ["Qwen3VLMoeConfig", "FLAVORS"]


@dataclass(frozen=True)
class Qwen3VLMoeConfig(Qwen3VLConfig):
    """A :class:`Qwen3VLConfig` whose ``text`` is a :class:`~hyper_parallel.models.qwen3_moe.args.Qwen3MoeConfig`
    (``moe`` set; its first ``first_k_dense_layers`` layers are dense: Hugging Face's ``mlp_only_layers``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.text, Qwen3MoeConfig):
            raise ValueError(f"Qwen3VLMoeConfig(text): expected a Qwen3MoeConfig (with moe), got "
                             f"{type(self.text).__name__}")


_DEBUG_TEXT = Qwen3MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                             rope_theta=5000000.0, tie_word_embeddings=True, first_k_dense_layers=1,
                             moe=qwen3_moe_layer(64, 32, num_experts=4, top_k=2))

#: ``debug`` runs on CPU in seconds (one dense layer, then two MoE layers of 4 experts, top 2);
#: ``30B-A3B``: Qwen/Qwen3-VL-30B-A3B-Instruct's sizes (meta-device construction and estimates)
FLAVORS: Dict[str, Qwen3VLMoeConfig] = {
    "debug": Qwen3VLMoeConfig(text=_DEBUG_TEXT, vision=_DEBUG_VISION, mrope_section=(2, 3, 3), image_token_id=500,
                              video_token_id=501, vision_start_token_id=502, vision_end_token_id=503),
    "30B-A3B": Qwen3VLMoeConfig(
        text=Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                            num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                            max_position_embeddings=262144, rope_theta=5000000.0, tie_word_embeddings=False,
                            moe=qwen3_moe_layer(2048, 768, num_experts=128, top_k=8)),
        vision=Qwen3VLVisionConfig(out_hidden_size=2048)),
}
