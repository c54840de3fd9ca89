# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 vision-language configuration (pure Python: no framework import).

Hugging Face's ``Qwen3_5ForConditionalGeneration`` (and ``Qwen3_5MoeForConditionalGeneration``) = Qwen3-VL's ViT
without DeepStack (:class:`~hyper_parallel.models.qwen3_vl.args.Qwen3VLVisionConfig` with no
``deepstack_visual_indexes``) + the Qwen3.5 hybrid decoder (:class:`~hyper_parallel.models.qwen3_5.args.Qwen3_5Config`:
Gated DeltaNet and gated full-attention layers; the full-attention layers rotate ``partial_rotary_factor`` of
each head with interleaved multimodal positions split by the text config's ``mrope_section``).
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from dataclasses import dataclass, field
from typing import Dict

from hyper_parallel.models.qwen3_5.args import Qwen3_5Config
from hyper_parallel.models.qwen3_5_moe.args import Qwen3_5MoeConfig, qwen3_5_moe_layer
from hyper_parallel.models.qwen3_vl.args import Qwen3VLVisionConfig

__all__ = ["Qwen3_5VLConfig", "Qwen3_5MoeVLConfig", "FLAVORS", "MOE_FLAVORS"]


@dataclass(frozen=True)
class Qwen3_5VLConfig:
    """The whole model: ``text`` (a Qwen3.5 decoder; its ``mrope_section`` splits the rotary frequencies between
    the temporal, height and width positions), ``vision`` (no DeepStack) and the special token ids
    (defaults: Hugging Face's ``Qwen3_5Config()``)."""

    text: Qwen3_5Config = field(default_factory=Qwen3_5Config)
    vision: Qwen3VLVisionConfig = field(default_factory=lambda: Qwen3VLVisionConfig(
        depth=27, hidden_size=1152, intermediate_size=4304, out_hidden_size=4096, deepstack_visual_indexes=()))
    image_token_id: int = 248056
    video_token_id: int = 248057
    vision_start_token_id: int = 248053
    vision_end_token_id: int = 248054

    def __post_init__(self) -> None:
        name = type(self).__name__
        if not isinstance(self.text, Qwen3_5Config):
            raise ValueError(f"{name}(text): expected a Qwen3_5Config, got {type(self.text).__name__}")
        if self.vision.deepstack_visual_indexes:
            raise ValueError(f"{name}(vision.deepstack_visual_indexes={self.vision.deepstack_visual_indexes}): "
                             "Qwen3.5's vision tower has no DeepStack levels; expected ()")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ValueError(f"{name}: vision.out_hidden_size {self.vision.out_hidden_size} must equal the language "
                             f"model's hidden_size {self.text.hidden_size}")
        ids = (self.image_token_id, self.video_token_id, self.vision_start_token_id, self.vision_end_token_id)
        if len(set(ids)) != 4:
            raise ValueError(f"{name}: the image, video, vision-start and vision-end token ids must differ, got {ids}")

    @property
    def mrope_section(self):
        """The text config's MRoPE split (temporal, height, width)."""
        return self.text.mrope_section


@dataclass(frozen=True)
class Qwen3_5MoeVLConfig(Qwen3_5VLConfig):
    """A :class:`Qwen3_5VLConfig` whose ``text`` is a :class:`~hyper_parallel.models.qwen3_5_moe.args.Qwen3_5MoeConfig`
    (every MLP a routed MoE block with a gated shared expert)."""

    text: Qwen3_5Config = field(default_factory=Qwen3_5MoeConfig)
    vision: Qwen3VLVisionConfig = field(default_factory=lambda: Qwen3VLVisionConfig(
        depth=27, hidden_size=1152, intermediate_size=4304, out_hidden_size=2048, deepstack_visual_indexes=()))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.text, Qwen3_5MoeConfig):
            raise ValueError(f"{type(self).__name__}(text): expected a Qwen3_5MoeConfig (with moe), got "
                             f"{type(self.text).__name__}")


_DEBUG = dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, max_position_embeddings=1024, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_key_head_dim=16, linear_value_head_dim=16, partial_rotary_factor=0.5, mrope_section=(3, 3, 2),
              full_attention_interval=2, chunk_size=8, tie_word_embeddings=True)
_DEBUG_VISION = Qwen3VLVisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                                    out_hidden_size=64, num_position_embeddings=64, deepstack_visual_indexes=())
_IDS = dict(image_token_id=500, video_token_id=501, vision_start_token_id=502, vision_end_token_id=503)

#: ``debug``: layers linear, full, linear, full and a 2-block ViT, seconds on CPU (its special token ids sit inside
#: its 512-word vocabulary); ``hf_default``: transformers' ``Qwen3_5Config()`` with the vision output width set to
#: the text width (the defaults disagree: 3584 vs 4096), for meta-device construction and estimates. A published
#: checkpoint is read with ``[model] init_from`` (its ``config.json`` gives the sizes).
FLAVORS: Dict[str, Qwen3_5VLConfig] = {
    "debug": Qwen3_5VLConfig(text=Qwen3_5Config(intermediate_size=128, **_DEBUG), vision=_DEBUG_VISION, **_IDS),
    "hf_default": Qwen3_5VLConfig(),
}

#: ``debug_moe`` (alias ``debug``): the dense debug sizes with every MLP 4 experts (top 2) + a shared expert;
#: ``hf_default``: transformers' ``Qwen3_5MoeConfig()`` (vision output width = text width 2048)
MOE_FLAVORS: Dict[str, Qwen3_5MoeVLConfig] = {
    "debug_moe": Qwen3_5MoeVLConfig(
        text=Qwen3_5MoeConfig(intermediate_size=32, shared_expert_intermediate_size=48,
                              moe=qwen3_5_moe_layer(64, 32, num_experts=4, top_k=2), **_DEBUG),
        vision=_DEBUG_VISION, **_IDS),
    "hf_default": Qwen3_5MoeVLConfig(),
}
MOE_FLAVORS["debug"] = MOE_FLAVORS["debug_moe"]
