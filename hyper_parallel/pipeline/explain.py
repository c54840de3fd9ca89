# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``explain_schedule``: a schedule's simulated timeline as text and (optionally) as a PNG.

The text is one row per rank on a time grid of the cheapest step's duration: ``F3`` forward of
microbatch 3, ``B``/``I``/``W`` the backward parts, ``.`` idle; below it the bubble numbers and the
formula the schedule is known by. The PNG (matplotlib, imported only when asked for) draws the same
timeline as coloured bars.
"""
from __future__ import annotations

import os
from typing import Optional, Union

from hyper_parallel.pipeline.schedules import Schedule, generate_schedule
from hyper_parallel.pipeline.simulate import Costs, SimulationResult, simulate_schedule
from hyper_parallel.pipeline.steps import MetaStepType

__all__ = ["explain_schedule", "bubble_formula"]

_COLORS = {"F": "#4e79a7", "B": "#e15759", "I": "#f28e2b", "W": "#59a14f", "OVERLAP_F_B": "#b07aa1"}


def bubble_formula(schedule: Schedule) -> str:
    """The bubble the schedule is known by (its paper's formula), as text."""
    v = schedule.stages_per_rank
    return {
        "GPipe": "bubble (p-1)(F+B) per rank = (p-1)/m of the ideal step",
        "1F1B": "bubble (p-1)(F+B) per rank = (p-1)/m of the ideal step",
        "Interleaved1F1B": f"bubble (p-1)(F+B)/v = (p-1)/(v*m) of the ideal step (v={v}, m a multiple of p)",
        "LoopedBFS": f"bubble (p-1)(F+B)/v = (p-1)/(v*m) of the ideal step (v={v}, m a multiple of p)",
        "InterleavedZeroBubble": "bubble (p-1)(F+I-W) per rank (ZB-H1 / ZB1P, I = backward-input)",
        "ZBVZeroBubble": "bubble (p-1)(F+I-W) per rank when F = I = W (ZB-V)",
        "Mpipe": ("encoder position ahead of 1F1B over the LM positions: no closed form (the encoder's cost "
                  "varies per microbatch); see the simulated numbers"),
        "DualPipeV": "bubble (p-1)(F&B+B-3W) per rank (DualPipe on 2p devices, F&B = overlapped F and B)",
    }.get(schedule.name, "custom schedule: no closed form")


def _grid(sim: SimulationResult, width: int, multi: bool) -> str:
    durations = [e - s for tl in sim.timelines.values() for s, e, _ in tl if e > s]
    unit = min(durations) if durations else 1.0
    slots = int(round(sim.makespan / unit))
    lines = []
    for r, tl in sorted(sim.timelines.items()):
        cells = ["." * width] * slots
        for s, e, a in tl:
            first, last = int(round(s / unit)), int(round(e / unit))
            label = _label(a, multi)
            for k in range(first, max(last, first + 1)):
                if k < slots:
                    cells[k] = label[:width].ljust(width)
        lines.append(f"rank {r}: " + " ".join(cells))
    return "\n".join(lines)


def _label(a, multi: bool = False) -> str:
    if a.type is MetaStepType.OVERLAP_F_B:
        return "+".join(_label(x, multi) for x in a.sub_steps)
    return str(a) if multi else f"{a.type.value}{a.microbatch_index}"


def explain_schedule(schedule: Union[Schedule, str], num_ranks: Optional[int] = None,
                     n_microbatches: Optional[int] = None, *, stages_per_rank: Optional[int] = None,
                     costs: Costs = None, png: Optional[Union[str, os.PathLike]] = None) -> str:
    """Text timeline of ``schedule`` (a ``Schedule`` or a schedule name with ``num_ranks`` and
    ``n_microbatches``) simulated with ``costs``; also draws it to ``png`` when given. Returns the text."""
    if isinstance(schedule, str):
        if num_ranks is None or n_microbatches is None:
            raise ValueError("explain_schedule(name): num_ranks and n_microbatches are required with a schedule name")
        schedule = generate_schedule(schedule, num_ranks, n_microbatches, stages_per_rank)
    sim = simulate_schedule(schedule, costs)
    multi = schedule.stages_per_rank > 1
    width = max(len(_label(a, multi)) for tl in sim.timelines.values() for _, _, a in tl)
    busy = min(sim.busy(r) for r in sim.timelines)
    text = [str(schedule), _grid(sim, width, multi),
            f"makespan {sim.makespan:g}, busy {busy:g} per rank, idle up to {sim.max_idle():g} per rank: "
            f"bubble {sim.bubble_ratio():.4f} of the ideal step, {sim.idle_fraction():.4f} of the step",
            bubble_formula(schedule)]
    if png is not None:
        _draw(schedule, sim, png)
        text.append(f"timeline drawn to {os.fspath(png)}")
    return "\n".join(text)


def _draw(schedule: Schedule, sim: SimulationResult, path) -> None:
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError as exc:  # pragma: no cover - matplotlib is a declared dependency
        raise RuntimeError("explain_schedule(png=...): needs matplotlib (pip install matplotlib)") from exc
    fig, ax = plt.subplots(figsize=(max(6.0, sim.makespan * 0.35), 0.6 * schedule.num_ranks + 1.2))
    for r, tl in sim.timelines.items():
        for s, e, a in tl:
            ax.barh(r, e - s, left=s, color=_COLORS.get(a.type.value, "#999999"), edgecolor="black", height=0.8)
            ax.text((s + e) / 2, r, _label(a), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(schedule.num_ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(schedule.num_ranks)])
    ax.invert_yaxis()
    ax.set_xlabel("time")
    ax.set_title(f"{schedule} — bubble {sim.bubble_ratio():.3f} of the ideal step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
