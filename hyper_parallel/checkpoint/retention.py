# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checkpoint folder naming and the retention policy of :class:`CheckpointManager` (pure Python).

Checkpoints of a run live in ``<folder>/step-<8 digits>``; a save in progress lives in a hidden staging
folder ``<folder>/.step-<8 digits>.tmp-<id>`` until it is published by one atomic rename. ``latest`` names
the newest published checkpoint and is replaced (atomically) only after the checkpoint is durable.
"""
from __future__ import annotations

import re
from typing import Iterable, List, Optional, Sequence

__all__ = ["step_dir_name", "parse_step_dir", "is_staging_name", "staging_name", "plan_retention",
           "should_save", "LATEST_FILE"]

LATEST_FILE = "latest"
_STEP_RE = re.compile(r"^step-(\d{8,})$")
_STAGING_RE = re.compile(r"^\.(.+)\.(tmp|old)-[0-9a-f]+$")


def step_dir_name(step: int) -> str:
    """``step-00000042`` for step 42."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"checkpoint step: expected a non-negative int, got {step!r}")
    return f"step-{step:08d}"


def parse_step_dir(name: str) -> Optional[int]:
    """The step of a published checkpoint folder name, or None for any other name."""
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None


def staging_name(final_name: str, save_id: str) -> str:
    """Hidden sibling name where a save of ``final_name`` is written before publication."""
    return f".{final_name}.tmp-{save_id}"


def is_staging_name(name: str) -> bool:
    """True for the hidden staging (``.tmp-``) and replaced (``.old-``) folder names of interrupted saves."""
    return bool(_STAGING_RE.match(name))


def should_save(step: int, interval: int, last_step: bool = False) -> bool:
    """True when ``step`` is a multiple of ``interval`` (or ``last_step``); step 0 is never saved by interval."""
    return last_step or (step > 0 and step % interval == 0)


def plan_retention(complete_steps: Iterable[int], keep_latest_k: int,
                   protect: Sequence[Optional[int]] = ()) -> List[int]:
    """Steps of complete checkpoints to delete so that the newest ``keep_latest_k`` remain.

    ``keep_latest_k <= 0`` keeps everything. Steps in ``protect`` (the one ``latest`` names, a save still
    in flight) are never deleted, and the newest complete checkpoint always survives, so the only
    complete checkpoint is never deleted whatever ``k`` is.
    """
    steps = sorted(set(complete_steps))
    if keep_latest_k <= 0 or not steps:
        return []
    keep = set(steps[-max(1, keep_latest_k):]) | {s for s in protect if s is not None}
    return [s for s in steps if s not in keep]
