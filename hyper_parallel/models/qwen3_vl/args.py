# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL configuration (pure Python: no framework import).

Qwen3-VL = a ViT vision tower (3-D patch embedding over time x height x width, a learned position table
bilinearly resized to each image's grid, 2-D axial rotary positions, full attention within each image, a
2x2 patch merger into the language model's width, and DeepStack features taken after some vision blocks and
added to the first language-model layers' hidden states at the image positions) + the Qwen3 decoder with
interleaved multimodal rotary positions (MRoPE: the rotary frequencies split between the temporal, height
and width position of each token, ``mrope_section``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, Tuple

from hyper_parallel.models.qwen3.args import Qwen3Config

__all__ = ["Qwen3VLVisionConfig", "Qwen3VLConfig", "FLAVORS", "VISION_ACTS"]

#: the vision MLP activations we implement (Hugging Face names)
VISION_ACTS = ("gelu_pytorch_tanh", "gelu", "silu", "quick_gelu")


@dataclass(frozen=True)
class Qwen3VLVisionConfig:
    """The vision tower (Hugging Face ``Qwen3VLVisionConfig`` field names)."""

    depth: int = 27
    hidden_size: int = 1152
    hidden_act: str = "gelu_pytorch_tanh"
    intermediate_size: int = 4304
    num_heads: int = 16
    in_channels: int = 3
    patch_size: int = 16
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    out_hidden_size: int = 3584
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: Tuple[int, ...] = (8, 16, 24)
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.hidden_act not in VISION_ACTS:
            raise ValueError(f"Qwen3VLVisionConfig(hidden_act={self.hidden_act!r}): expected one of {VISION_ACTS}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"Qwen3VLVisionConfig: hidden_size {self.hidden_size} is not divisible by num_heads "
                             f"{self.num_heads}")
        side = int(round(self.num_position_embeddings ** 0.5))
        if side * side != self.num_position_embeddings:
            raise ValueError(f"Qwen3VLVisionConfig(num_position_embeddings={self.num_position_embeddings}): "
                             "expected a square number (the table is side x side)")
        bad = [i for i in self.deepstack_visual_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"Qwen3VLVisionConfig(deepstack_visual_indexes={self.deepstack_visual_indexes}): "
                             f"{bad} outside the {self.depth} vision blocks")


@dataclass(frozen=True)
class Qwen3VLConfig:
    """The whole model: ``text`` (a Qwen3 decoder), ``vision``, the special token ids and MRoPE's split of the
    rotary frequencies (``mrope_section``: temporal, height, width; sums to ``head_dim / 2``)."""

    text: Qwen3Config = field(default_factory=Qwen3Config)
    vision: Qwen3VLVisionConfig = field(default_factory=Qwen3VLVisionConfig)
    mrope_section: Tuple[int, int, int] = (24, 20, 20)
    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653

    def __post_init__(self) -> None:
        if len(self.mrope_section) != 3 or sum(self.mrope_section) != self.text.head_dim // 2:
            raise ValueError(f"Qwen3VLConfig(mrope_section={tuple(self.mrope_section)}): expected three ints summing "
                             f"to head_dim / 2 = {self.text.head_dim // 2}")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ValueError(f"Qwen3VLConfig: vision.out_hidden_size {self.vision.out_hidden_size} must equal the "
                             f"language model's hidden_size {self.text.hidden_size}")
        if len(self.vision.deepstack_visual_indexes) > self.text.num_hidden_layers:
            raise ValueError(f"Qwen3VLConfig: {len(self.vision.deepstack_visual_indexes)} DeepStack features but only "
                             f"{self.text.num_hidden_layers} language-model layers")


_DEBUG_TEXT = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                          rope_theta=5000000.0, tie_word_embeddings=True)
_DEBUG_VISION = Qwen3VLVisionConfig(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                                    out_hidden_size=64, num_position_embeddings=64, deepstack_visual_indexes=(0, 1))

#: ``debug`` runs on CPU in seconds (its special token ids sit inside its 512-word vocabulary);
#: ``debug_untied`` is ``debug`` with its own LM head (an encoder stage on several pipeline ranks needs it);
#: ``hf_default`` is transformers' ``Qwen3VLConfig()`` with the vision output width set to the text width (the
#: defaults disagree: 3584 vs 4096), for meta-device construction and estimates only
FLAVORS: Dict[str, Qwen3VLConfig] = {
    "debug": Qwen3VLConfig(text=_DEBUG_TEXT, vision=_DEBUG_VISION, mrope_section=(2, 3, 3), image_token_id=500,
                           video_token_id=501, vision_start_token_id=502, vision_end_token_id=503),
    "debug_untied": Qwen3VLConfig(text=dataclasses.replace(_DEBUG_TEXT, tie_word_embeddings=False),
                                  vision=_DEBUG_VISION, mrope_section=(2, 3, 3), image_token_id=500,
                                  video_token_id=501, vision_start_token_id=502, vision_end_token_id=503),
    "hf_default": Qwen3VLConfig(
        text=Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=128000,
                         rope_theta=500000.0, tie_word_embeddings=False),
        vision=Qwen3VLVisionConfig(out_hidden_size=4096)),
}
