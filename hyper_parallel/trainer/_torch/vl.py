# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch side of :class:`~hyper_parallel.trainer.vl.VLTrainer`: image-text rows
(:mod:`hyper_parallel.trainer.vl_sft`) -> the Qwen3-VL forward and the summed next-token loss.

A micro-batch's rows are stacked (``input_ids``, ``labels``, MRoPE ``position_ids [3, b, s]``, the packed
documents' attention mask) and their images concatenated in row order, which is the order of their
placeholders. A micro-batch without any image still runs the vision tower once on a blank 1-frame image
and adds ``0 x`` its output to the loss: every rank then runs the same modules (FSDP gathers the vision blocks
on every rank, or a rank with images waits for one without) and the vision parameters get a (zero) gradient on
every layout alike, so a distributed run equals one process.
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch

__all__ = ["vl_inputs", "vl_loss", "is_vl_rows"]


def is_vl_rows(rows: List[Any]) -> bool:
    """Whether ``rows`` are image-text rows (they carry ``image_grid_thw``)."""
    return bool(rows) and isinstance(rows[0], dict) and "image_grid_thw" in rows[0]


def vl_inputs(rows: List[Dict[str, Any]], device: Any = None) -> Dict[str, Any]:
    """Tensors of image-text rows: ``input_ids``, ``labels`` ``[b, s]``, ``position_ids [3, b, s]``, the
    boolean document mask ``[b, 1, s, s]``, ``pixel_values`` and ``image_grid_thw`` (None without images), on
    ``device`` (default: torch's default device)."""
    from hyper_parallel.models.llama3.model import document_mask  # pylint: disable=import-outside-toplevel
    out = {k: torch.tensor([r[k] for r in rows], dtype=torch.long, device=device)
           for k in ("input_ids", "labels", "doc_ids")}
    out["position_ids"] = torch.tensor([r["position_ids"] for r in rows], dtype=torch.long,
                                       device=device).permute(1, 0, 2)
    out["attention_mask"] = document_mask(out.pop("doc_ids"))
    pixels = [r["pixel_values"] for r in rows if r["pixel_values"] is not None]
    grids = [g for r in rows for g in r["image_grid_thw"]]
    out["pixel_values"] = torch.cat(pixels).to(device) if pixels else None
    out["image_grid_thw"] = torch.tensor(grids, dtype=torch.long, device=device) if grids else None
    return out


def _blank_vision(model: Any, dtype: Any) -> torch.Tensor:
    """``0 x`` the vision tower's outputs on one blank image of one merged patch (see the module doc)."""
    vision = model.model.visual
    c = vision.config
    grid = torch.tensor([[1, c.spatial_merge_size, c.spatial_merge_size]], device=vision.pos_embed.weight.device)
    width = c.in_channels * c.temporal_patch_size * c.patch_size ** 2
    pixels = torch.zeros(c.spatial_merge_size ** 2, width, device=grid.device, dtype=dtype)
    merged, deepstack = vision(pixels, grid)
    return sum((f.sum() for f in deepstack), merged.sum()) * 0.0


def vl_loss(backend: Any, rows: List[Dict[str, Any]]) -> torch.Tensor:
    """This rank's share of the step loss for image-text rows: the summed token cross-entropy times
    ``backend._sft_norm`` (``finetune.prepare_sft_step``: the global count of loss tokens of the step)."""
    t = vl_inputs(rows, backend.device)
    model = backend.model
    with backend._autocast():  # pylint: disable=protected-access
        logits = model(t["input_ids"], attention_mask=t["attention_mask"], pixel_values=t["pixel_values"],
                       image_grid_thw=t["image_grid_thw"], position_ids=t["position_ids"])
        total = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), t["labels"].flatten(),
                                                  ignore_index=-100, reduction="sum")
        if t["pixel_values"] is None:
            total = total + _blank_vision(model, logits.dtype)
    return total * backend._sft_norm  # pylint: disable=protected-access
