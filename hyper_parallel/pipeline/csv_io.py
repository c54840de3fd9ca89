# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Custom schedules as CSV in torch's action-string format (pure Python).

One row per rank, one cell per step (``2I0``, ``1F3``, ``(0F3;1B1)OVERLAP_F_B``), an empty cell for an
idle slot — the ``compute_only`` files ``torch.distributed.pipelining`` and TorchTitan read. A lowered
schedule (with SEND/RECV/REDUCE_GRAD) can be written too (``lowered=True``).
"""
from __future__ import annotations

import csv
import io
import os
from typing import Optional, Union

from hyper_parallel.pipeline.schedules import Schedule, custom_schedule
from hyper_parallel.pipeline.steps import MetaStep

__all__ = ["schedule_to_csv", "schedule_from_csv"]


def schedule_to_csv(schedule: Schedule, path: Optional[Union[str, os.PathLike]] = None, *,
                    lowered: bool = False) -> str:
    """The schedule as CSV text (also written to ``path`` when given)."""
    rows = schedule.lowered() if lowered else schedule.compute
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for r in range(schedule.num_ranks):
        writer.writerow(["" if a is None else str(a) for a in rows[r]])
    text = buf.getvalue()
    if path is not None:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    return text


def _parse_row(r: int, row) -> list:
    try:
        steps = [MetaStep.parse(cell) for cell in row]
    except ValueError as exc:
        raise ValueError(f"schedule_from_csv: row {r} (rank {r}): {exc}") from exc
    bad = [str(a) for a in steps if a is not None and not a.is_compute]
    if bad:
        raise ValueError(f"schedule_from_csv: row {r} (rank {r}) holds non-compute steps {bad}; a custom schedule "
                         "lists compute steps only (F, I, W, B, OVERLAP_F_B): communication is added by lowering")
    return steps


def schedule_from_csv(source: Union[str, os.PathLike], n_microbatches: Optional[int] = None, *,
                      num_stages: Optional[int] = None, name: str = "custom") -> Schedule:
    """Read a compute-only schedule from CSV text or a file path.

    ``n_microbatches`` defaults to the largest microbatch index + 1. The result is not validated here:
    call ``validate_schedule`` (the schedules' runtime does) to get the deadlock-freedom proof.
    """
    text = str(source)
    if "\n" not in text and os.path.exists(text):
        with open(text, encoding="utf-8") as fh:
            text = fh.read()
    compute = {r: _parse_row(r, row) for r, row in enumerate(csv.reader(io.StringIO(text)))}
    if not compute:
        raise ValueError("schedule_from_csv: the CSV holds no rows")
    mbs = [leaf.microbatch_index for row in compute.values() for a in row if a is not None for leaf in a.leaves()]
    m = n_microbatches if n_microbatches is not None else (max(mbs) + 1 if mbs else 0)
    return custom_schedule(compute, m, num_stages, name)
