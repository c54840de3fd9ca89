# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Activation swap under pipeline parallelism: hook a ``hyper_parallel.pipeline`` schedule's actions.

In a pipeline step a rank runs the forwards of several microbatches before their backwards (1F1B
keeps up to ``num_stages`` in flight, GPipe all of them): their activations wait, and swapping them
out is what lets a stage hold more microbatches. :func:`swap_pipeline_schedule` connects a schedule
to a :class:`SwapManager`:

* every local stage's ``forward_one_chunk(mb)`` runs inside ``manager.microbatch((stage, mb))``, so
  the swap records of that forward (the stage's ``swap_wrapper`` ed layers) are tagged with it;
* the rank's compute list gives the order of the backward actions (``B``/``I``, and the backward
  half of ``OVERLAP_F_B``): ``manager.set_backward_order`` takes it, so when one microbatch's
  backward reaches its last swapped group, the next microbatch *in schedule order* is prefetched;
* when a backward action starts, the records of that microbatch are prefetched if nothing did yet
  (the first action of a step).
"""
from __future__ import annotations

import functools
from typing import Any, List, Tuple

from hyper_parallel.activation.manager import SwapManager

__all__ = ["swap_pipeline_schedule", "backward_order"]


def backward_order(steps) -> List[Tuple[int, int]]:
    """``(stage, microbatch)`` of each backward action of a rank's compute list, in order."""
    out: List[Tuple[int, int]] = []
    for step in steps:
        if step is None:  # an idle slot of the compute list
            continue
        subs = getattr(step, "sub_steps", None) or (step,)
        for sub in subs:
            if sub.type.name in ("B", "I") and (sub.stage_index, sub.microbatch_index) not in out:
                out.append((sub.stage_index, sub.microbatch_index))
    return out


def _forward(orig, manager: SwapManager, stage_index: int, mb: int, args, kwargs):
    with manager.microbatch((stage_index, mb)):
        return orig(mb, args, kwargs)


def _backward(orig, manager: SwapManager, stage_index: int, mb: int, grads, **kwargs):
    for group in manager.pending_groups((stage_index, mb))[-1:]:
        manager.prefetch(group, (stage_index, mb))
    return orig(mb, grads, **kwargs)


def swap_pipeline_schedule(schedule: Any, manager: SwapManager) -> Any:
    """Hook ``schedule`` (a ``hyper_parallel.pipeline`` schedule object) to ``manager``; returns it.
    Apply ``swap_wrapper``/``apply_activation_policy(..., mode="swap")`` to the stage modules first."""
    if not isinstance(manager, SwapManager):
        raise TypeError(f"swap_pipeline_schedule(manager): expected a SwapManager, got {type(manager).__name__}")
    stages = getattr(schedule, "_stages", None)
    order = getattr(schedule, "pipeline_order", None)
    if not stages or order is None:
        raise TypeError(f"swap_pipeline_schedule(schedule): expected a hyper_parallel.pipeline schedule, got "
                        f"{type(schedule).__name__}")
    rank = stages[0].group_rank
    manager.set_backward_order(backward_order(order[rank]))
    for stage in stages:
        if "_hp_swap_hooked" in stage.__dict__:
            raise ValueError(f"swap_pipeline_schedule: stage {stage.stage_index} is already hooked")
        stage.forward_one_chunk = functools.partial(_forward, stage.forward_one_chunk, manager, stage.stage_index)
        stage.backward_one_chunk = functools.partial(_backward, stage.backward_one_chunk, manager,
                                                     stage.stage_index)
        stage.__dict__["_hp_swap_hooked"] = True
    return schedule
