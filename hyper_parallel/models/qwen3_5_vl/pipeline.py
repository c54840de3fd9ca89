# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline parallel for the Qwen3.5 vision-language models (dense and MoE): Qwen3-VL's stage machinery
(:mod:`hyper_parallel.models.qwen3_vl.pipeline`: the pipeline batch, the encoder stage, both placements, an
encoder stage on several ranks) with the Qwen3.5 hybrid language model in the decoder stages.

The vision tower has no DeepStack, so only the hidden state crosses a stage boundary. Each decoder stage rebuilds
what :class:`~hyper_parallel.models.qwen3_5.model.Qwen3_5TextModel` derives from its inputs: the interleaved
MRoPE positions (the batch's ``position_ids [b, 3, S]``, :func:`~hyper_parallel.models.qwen3_vl.model.rope_index`)
and, for the trainer's packed rows (a boolean ``[b, 1, S, S]`` document mask), the per-document text positions
(:func:`~hyper_parallel.models.qwen3_5_vl.model.document_positions`): the Gated DeltaNet layers reset their conv
window and recurrent state at every document start and the full-attention layers stay inside each document, as
in :meth:`Qwen3_5ForConditionalGeneration.forward`.
"""
from __future__ import annotations

import torch

from hyper_parallel.models.qwen3_5.model import _split_positions
from hyper_parallel.models.qwen3_5_vl.model import document_positions
from hyper_parallel.models.qwen3_vl.pipeline import Qwen3VLStageModule

__all__ = ["Qwen3_5VLStageModule"]


class Qwen3_5VLStageModule(Qwen3VLStageModule):  # pylint: disable=invalid-name  # Hugging Face's Qwen3_5 names
    """One pipeline stage of a :class:`~hyper_parallel.models.qwen3_5_vl.model.Qwen3_5ForConditionalGeneration`
    (or the MoE one): as :class:`~hyper_parallel.models.qwen3_vl.pipeline.Qwen3VLStageModule`, the decoder layers
    being Qwen3.5's hybrid ones (:meth:`decode`)."""

    def __init__(self, model, layers, *, encoder: bool, head: bool) -> None:
        super().__init__(model, layers, encoder=encoder, head=head)
        # the text model's attention context (document layout, padding, full-attention mask) as its forward
        # builds it; a bound method, not a submodule: the stage holds only its own layers' parameters
        self.__dict__["_text_context"] = model.model.language_model._context  # pylint: disable=protected-access

    def decode(self, h, levels, first: int, position_ids, attention_mask):
        """The hybrid decoder layers this stage holds over ``h`` (see the module docstring); ``levels`` and
        ``first`` are empty / unused (no DeepStack)."""
        del levels, first
        bsz, seq = h.shape[0], h.shape[1]
        positions, mask = position_ids.transpose(0, 1), attention_mask
        if mask is not None and mask.dim() == 4:  # packed documents: per-document text positions first
            positions = torch.cat([document_positions(mask)[None].to(positions.device), positions])
            mask = None
        text_positions, rope_positions = _split_positions(positions, bsz, seq, h.device)
        text = self.model.language_model
        cos, sin = text.rotary(rope_positions)
        context = self._text_context(text_positions, mask, bsz, seq, h.device)
        for i in self.layer_ids:
            h = text.layers[str(i)](h, cos, sin, context)
        return h
