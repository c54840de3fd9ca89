# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 vision-language models on torch: Hugging Face's ``Qwen3_5ForConditionalGeneration`` and
``Qwen3_5MoeForConditionalGeneration``.

The vision tower is :class:`~hyper_parallel.models.qwen3_vl.model.Qwen3VLVisionModel` without DeepStack, the
language model :class:`~hyper_parallel.models.qwen3_5.model.Qwen3_5TextModel` (Gated DeltaNet + gated full
attention, dense or MoE MLPs). The merged patch embeddings replace the image / video placeholder tokens
(``masked_scatter``, as transformers), and the full-attention layers rotate with the interleaved MRoPE positions
of :func:`~hyper_parallel.models.qwen3_vl.model.rope_index` (transformers' ``get_rope_index``: text tokens count
on all three axes, an image's placeholders take its merged grid's (temporal, row, column) offset by the running
position, which then advances by ``max(rows, columns)``; a video's frames are one grid each).

Parameter names are Hugging Face's (``model.visual.*``, ``model.language_model.*``, ``lm_head.weight``) except
the Gated DeltaNet's packed tensors and the MoE experts, which the state-dict adapter converts
(:mod:`hyper_parallel.models.qwen3_5_vl.state_dict_adapter`).

Packed documents (the trainer's rows): a boolean ``[batch, 1, seq, seq]`` document mask as ``attention_mask``;
the model turns it into per-document text positions, so the linear-attention layers reset their conv window
and recurrent state at every document start and full attention stays inside each document.
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.models.qwen3_5.model import Qwen3_5ForCausalLM, Qwen3_5TextModel
from hyper_parallel.models.qwen3_5_vl.args import FLAVORS, MOE_FLAVORS, Qwen3_5MoeVLConfig, Qwen3_5VLConfig
from hyper_parallel.models.qwen3_vl.model import Qwen3VLVisionModel, rope_index

__all__ = ["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5VLConfig",
           "Qwen3_5MoeVLConfig", "FLAVORS", "MOE_FLAVORS", "document_positions"]


def document_positions(mask: torch.Tensor) -> torch.Tensor:
    """Per-document text positions ``[batch, seq]`` of a boolean causal document mask ``[batch, 1, seq, seq]``
    (token ``i`` starts a document when it may not attend to token ``i - 1``): 0, 1, 2, ... restarting at every
    document start."""
    seq = mask.shape[-1]
    starts = torch.ones(mask.shape[0], seq, dtype=torch.bool, device=mask.device)
    if seq > 1:
        idx = torch.arange(1, seq, device=mask.device)
        starts[:, 1:] = ~mask[:, 0, idx, idx - 1].bool()
    index = torch.arange(seq, device=mask.device).expand(mask.shape[0], -1)
    last_start = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - last_start


class _Inner(nn.Module):
    """``model``: the vision tower and the language model (Hugging Face's ``Qwen3_5Model`` names)."""

    def __init__(self, config: Qwen3_5VLConfig) -> None:
        super().__init__()
        self.visual = Qwen3VLVisionModel(config.vision)
        self.language_model = Qwen3_5TextModel(config.text)


class Qwen3_5ForConditionalGeneration(nn.Module):
    """Qwen3.5 with its vision tower and LM head. ``forward(input_ids, attention_mask=None, pixel_values=None,
    image_grid_thw=None, pixel_values_videos=None, video_grid_thw=None, position_ids=None,
    mm_token_type_ids=None)`` returns logits ``[batch, seq, vocab]`` (see the module docstring)."""

    config_cls = Qwen3_5VLConfig

    def __init__(self, config: Qwen3_5VLConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__}(config): expected a {self.config_cls.__name__}, got "
                            f"{type(config).__name__}")
        self.config = config
        self.model = _Inner(config)
        self.lm_head = nn.Linear(config.text.hidden_size, config.text.vocab_size, bias=False)
        if config.text.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Hugging Face's init: the language model as :meth:`Qwen3_5ForCausalLM.reset_parameters`; the vision
        tower's linear, convolution and position weights Normal(0, std), zero biases, LayerNorms at one."""
        Qwen3_5ForCausalLM.reset_parameters(self, std, root=self.model.language_model)
        for mod in self.model.visual.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding, nn.Conv3d)):
                nn.init.normal_(mod.weight, std=std)
            if isinstance(mod, nn.LayerNorm):
                nn.init.ones_(mod.weight)
            if isinstance(mod, (nn.Linear, nn.Conv3d, nn.LayerNorm)) and mod.bias is not None:
                nn.init.zeros_(mod.bias)
        if not self.config.text.tie_word_embeddings:
            nn.init.normal_(self.lm_head.weight, std=std)

    def _scatter(self, ids: torch.Tensor, embeds: torch.Tensor, token: int, pixels, grid, what: str) -> torch.Tensor:
        """Replace the ``token`` placeholders by the vision tower's merged embeddings."""
        n = int((ids == token).sum())
        if pixels is None:
            if n:
                raise ValueError(f"{type(self).__name__}: {n} {what} placeholder tokens in input_ids but no "
                                 f"{'pixel_values' if what == 'image' else 'pixel_values_videos'}")
            return embeds
        merged, _ = self.model.visual(pixels, grid)
        if n != merged.shape[0]:
            raise ValueError(f"{type(self).__name__}: {n} {what} placeholder tokens in input_ids but the {what} "
                             f"features have {merged.shape[0]} rows (grid_thw {grid.tolist()})")
        return embeds.masked_scatter((ids == token)[..., None], merged.to(embeds.dtype))

    def _positions(self, input_ids, attention_mask, position_ids, image_grid_thw, video_grid_thw,
                   mm_token_type_ids) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(positions for the text model, its attention mask): ``[3, b, s]`` MRoPE positions and a padding mask,
        or, for a 4-D document mask, ``[4, b, s]`` (per-document text positions first) and no mask."""
        if position_ids is None:
            padding = attention_mask if attention_mask is not None and attention_mask.dim() == 2 else None
            position_ids = rope_index(input_ids, self.config, image_grid_thw, video_grid_thw, padding,
                                      mm_token_type_ids)
        elif position_ids.dim() == 2:
            position_ids = position_ids[None].expand(3, -1, -1)
        if attention_mask is not None and attention_mask.dim() == 4:
            text = document_positions(attention_mask)
            return torch.cat([text[None].to(position_ids.device), position_ids]), None
        return position_ids, attention_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,  # pylint: disable=too-many-arguments
                pixel_values: Optional[torch.Tensor] = None, image_grid_thw: Optional[torch.Tensor] = None,
                pixel_values_videos: Optional[torch.Tensor] = None, video_grid_thw: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None,
                mm_token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits; ``attention_mask``: a ``[batch, seq]`` padding mask or a boolean ``[batch, 1, seq, seq]``
        document mask; ``position_ids`` (``[3, batch, seq]`` MRoPE) default to :func:`rope_index` of the
        inputs."""
        cfg = self.config
        lm = self.model.language_model
        embeds = lm.embed_tokens(input_ids)
        embeds = self._scatter(input_ids, embeds, cfg.image_token_id, pixel_values, image_grid_thw, "image")
        embeds = self._scatter(input_ids, embeds, cfg.video_token_id, pixel_values_videos, video_grid_thw, "video")
        positions, mask = self._positions(input_ids, attention_mask, position_ids, image_grid_thw, video_grid_thw,
                                          mm_token_type_ids)
        h = lm(position_ids=positions, attention_mask=mask, inputs_embeds=embeds)
        return self.lm_head(h)

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (labels already shifted, -100 ignored)."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration):
    """Qwen3.5-MoE with its vision tower and LM head (``forward`` as :class:`Qwen3_5ForConditionalGeneration`)."""

    config_cls = Qwen3_5MoeVLConfig
