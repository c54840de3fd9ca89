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

__all__ = ["vl_inputs", "vl_loss", "is_vl_rows", "vl_pp_batch", "vl_pp_pass"]


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
    from hyper_parallel.models.qwen3_vl.pipeline import blank_vision_term  # pylint: disable=import-outside-toplevel
    return blank_vision_term(model.model.visual, dtype)


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


# ---------------------------------------------------------------------------------------------- pipeline
def vl_pp_batch(rows: List[Dict[str, Any]], vision: Any, device: Any = None) -> Dict[str, Any]:
    """Image-text rows as the pipeline batch of :func:`~hyper_parallel.models.qwen3_vl.pipeline.pack_vl_batch`
    (every tensor with a batch dim, so the schedule splits it into microbatches): ``input_ids``, ``labels``,
    ``position_ids [b, 3, s]``, the document mask ``[b, 1, s, s]``, each row's image patches zero-padded to
    ``pixel_values [b, P, C*T*p*p]`` and its grids to ``image_grid_thw [b, N, 3]`` (all-zero rows: no image).
    ``vision``: the model's vision config (the patch width when no row has an image); ``device``: where the tensors
    go (default: where :func:`vl_inputs` puts them)."""
    t = vl_inputs(rows, device)
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    patches = [0 if r["pixel_values"] is None else int(r["pixel_values"].shape[0]) for r in rows]
    dev = t["input_ids"].device
    pix = torch.zeros(len(rows), max([1] + patches), width, device=dev)
    grid = torch.zeros(len(rows), max([1] + [len(r["image_grid_thw"]) for r in rows]), 3, dtype=torch.long,
                       device=dev)
    for i, r in enumerate(rows):
        if r["pixel_values"] is not None:
            pix[i, :patches[i]] = r["pixel_values"]
            grid[i, :len(r["image_grid_thw"])] = torch.tensor(r["image_grid_thw"], dtype=torch.long, device=dev)
    return {"input_ids": t["input_ids"], "labels": t["labels"], "attention_mask": t["attention_mask"],
            "position_ids": t["position_ids"].permute(1, 0, 2).contiguous(), "pixel_values": pix,
            "image_grid_thw": grid}


def vl_pp_pass(backend: Any, rows: List[Dict[str, Any]], train: bool) -> float:
    """One pipeline schedule pass over image-text rows (the stages of ``pipeline_qwen3_vl``): input ids, patches and
    grids to the encoder stage, positions and the document mask to every stage, labels to the last; under Mpipe
    the training pass balances its microbatches by image patches (``image_token_costs``). The loss is the SFT
    rows' (summed over loss tokens, normalised over the step: ``finetune.sft_pp_loss``); returns the mean
    microbatch loss on the last stage's rank, else 0."""
    from hyper_parallel.models.qwen3_vl.pipeline import image_token_costs  # pylint: disable=C0415
    from hyper_parallel.pipeline.api import ScheduleMpipe  # pylint: disable=import-outside-toplevel
    # pylint: disable=protected-access
    t = vl_pp_batch(rows, backend.model_config.vision, backend.device)
    schedule = backend._schedule
    first, last = backend._pp_first, backend._pp_last
    extra: Dict[str, Any] = {}
    if train and isinstance(schedule, ScheduleMpipe) and schedule.config.balance:
        extra["sample_costs"] = image_token_costs(t)
    losses: List[Any] = []
    run = schedule.step if train else schedule.eval
    backend._sft_pp = True
    try:
        with backend._autocast():
            args = (t["input_ids"], t["pixel_values"], t["image_grid_thw"]) if first else ()
            run(*args, target=t["labels"] if last else None, losses=losses, return_outputs=False,
                position_ids=t["position_ids"], attention_mask=t["attention_mask"], **extra)
    finally:
        backend._sft_pp = False
    return sum(float(x) for x in losses) / len(losses) if losses else 0.0
