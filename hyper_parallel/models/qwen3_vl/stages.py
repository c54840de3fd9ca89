# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The decoder layers of every Qwen3-VL pipeline stage (pure Python: ``hp-train --check`` asks it without torch)."""
from __future__ import annotations

from typing import List, Optional, Sequence

__all__ = ["PLACEMENTS", "stage_layers"]

#: where the vision encoder runs: with the first decoder layers on stage 0, or alone on stage 0 (Mpipe)
PLACEMENTS = ("stage0", "mpipe")


def stage_layers(num_layers: int, num_stages: int, placement: str,
                 layers_per_stage: Optional[Sequence[int]] = None, what: str = "layers_per_stage") -> List[List[int]]:
    """Decoder layers of every stage. ``stage0``: layers dealt over all stages (the first one also holds the
    vision tower and the embedding, the last the norm and head, each counted as one layer of work);
    ``mpipe``: stage 0 holds none (the encoder stage), the LM stages share them. ``layers_per_stage``
    overrides with explicit counts (one per stage); ``what`` names it in errors (a config key)."""
    from hyper_parallel.pipeline.split import check_layers_per_stage, split_layers  # pylint: disable=C0415
    if placement not in PLACEMENTS:
        raise ValueError(f"pipeline_qwen3_vl(placement={placement!r}): expected one of {list(PLACEMENTS)}")
    if layers_per_stage is not None:
        out = check_layers_per_stage(layers_per_stage, num_layers, num_stages, what=what)
        if placement == "mpipe" and out[0]:
            raise ValueError(f"{what}={list(layers_per_stage)}: under Mpipe stage 0 is the encoder stage "
                             "and holds no decoder layer (its entry must be 0)")
        return out
    if placement == "stage0":
        return split_layers(num_layers, num_stages)
    return [[]] + split_layers(num_layers, num_stages - 1, first_stage_less=0)
