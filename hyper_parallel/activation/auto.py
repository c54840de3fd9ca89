# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``mode = "auto"``: choose each layer's mode under an activation memory budget (pure).

Input: per layer, the measured activation bytes kept after forward and the extra step time of each
candidate mode (``none``: keep everything, no extra time; ``selective-op``: keep matmul/attention/
collective outputs, recompute the rest; ``full``: keep the layer input, recompute the layer;
``swap``: keep almost nothing on the device, pay the transfer time not hidden behind compute).
Output: the cheapest combination (least predicted extra time) whose total bytes fit the budget —
a multiple-choice knapsack solved exactly by dynamic programming over the budget cut into
``resolution`` units. Memory is rounded *up* to whole units, so a plan the solver calls feasible
has a true total of at most the budget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

__all__ = ["LayerOption", "LayerProfile", "AutoPlan", "AutoBudgetError", "plan_auto"]


class AutoBudgetError(ValueError):
    """No combination of the allowed modes fits the budget (the message gives the smallest total)."""


@dataclass(frozen=True)
class LayerOption:
    """One candidate mode of one layer: activation bytes it keeps after forward and extra seconds per step."""

    mode: str
    memory_bytes: int
    time_s: float


@dataclass(frozen=True)
class LayerProfile:
    """A layer's candidates (measured)."""

    name: str
    options: Tuple[LayerOption, ...]


@dataclass(frozen=True)
class AutoPlan:
    """The chosen mode per layer with the predicted activation bytes and extra step time."""

    choices: Tuple[Tuple[str, str], ...]
    predicted_bytes: int
    predicted_extra_s: float
    budget_bytes: int
    fixed_bytes: int
    profiles: Tuple[LayerProfile, ...]

    def as_dict(self) -> Dict[str, str]:
        """layer name -> chosen mode."""
        return dict(self.choices)

    def report(self) -> str:
        """A fixed-width table: per layer the candidates (MiB, ms) and the choice, then the totals."""
        lines = [f"auto activation plan: budget {self.budget_bytes / 2 ** 20:.2f} MiB, predicted "
                 f"{self.predicted_bytes / 2 ** 20:.2f} MiB (fixed {self.fixed_bytes / 2 ** 20:.2f} MiB outside the "
                 f"layers), extra {self.predicted_extra_s * 1e3:.2f} ms/step"]
        chosen = self.as_dict()
        for prof in self.profiles:
            cells = []
            for opt in prof.options:
                mark = "*" if opt.mode == chosen[prof.name] else " "
                cells.append(f"{mark}{opt.mode} {opt.memory_bytes / 2 ** 20:.2f} MiB/{opt.time_s * 1e3:.2f} ms")
            lines.append(f"  {prof.name}: " + "  ".join(cells))
        return "\n".join(lines)


def _check(profiles: Sequence[LayerProfile], budget_bytes: int, fixed_bytes: int, resolution: int) -> None:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise ValueError(f"plan_auto(budget_bytes): expected a positive integer, got {budget_bytes!r}")
    if not isinstance(fixed_bytes, int) or fixed_bytes < 0:
        raise ValueError(f"plan_auto(fixed_bytes): expected a non-negative integer, got {fixed_bytes!r}")
    if not isinstance(resolution, int) or resolution < 1:
        raise ValueError(f"plan_auto(resolution): expected a positive integer, got {resolution!r}")
    for prof in profiles:
        if not prof.options:
            raise ValueError(f"plan_auto: layer {prof.name!r} has no candidate modes")
        for opt in prof.options:
            if opt.memory_bytes < 0 or opt.time_s < 0 or math.isnan(opt.time_s):
                raise ValueError(f"plan_auto: layer {prof.name!r} mode {opt.mode!r} has a negative or NaN cost "
                                 f"({opt.memory_bytes} B, {opt.time_s} s)")


def _solve(profiles: Sequence[LayerProfile], unit: int, cap: int) -> Tuple[List[float], List[List[int]]]:
    """Multiple-choice knapsack: ``best[c]`` = least time with exactly ``c`` units used; ``picks``
    per layer the option index that reached each ``c``."""
    inf = float("inf")
    best: List[float] = [0.0] + [inf] * cap
    picks: List[List[int]] = []
    for prof in profiles:
        weights = [-(-o.memory_bytes // unit) for o in prof.options]
        nxt = [inf] * (cap + 1)
        pick = [-1] * (cap + 1)
        for k, (w, opt) in enumerate(zip(weights, prof.options)):
            for c in range(w, cap + 1):
                t = best[c - w] + opt.time_s
                if t < nxt[c]:
                    nxt[c] = t
                    pick[c] = k
        best = nxt
        picks.append(pick)
    return best, picks


def plan_auto(profiles: Sequence[LayerProfile], budget_bytes: int, *, fixed_bytes: int = 0,
              resolution: int = 2048) -> AutoPlan:
    """The least-extra-time choice of one option per layer with ``fixed_bytes + sum(memory) <= budget``.

    Raises :class:`AutoBudgetError` when even the smallest options do not fit.
    """
    profiles = tuple(profiles)
    _check(profiles, budget_bytes, fixed_bytes, resolution)
    room = budget_bytes - fixed_bytes
    smallest = sum(min(o.memory_bytes for o in p.options) for p in profiles)
    if room < 0 or smallest > room:
        raise AutoBudgetError(
            f"activation.auto budget {budget_bytes / 2 ** 20:.2f} MiB is too small: the activations outside the "
            f"layers take {fixed_bytes / 2 ** 20:.2f} MiB and the layers need at least {smallest / 2 ** 20:.2f} MiB "
            f"with the allowed modes ({sorted({o.mode for p in profiles for o in p.options})})")
    unit = max(1, -(-room // resolution))
    best, picks = _solve(profiles, unit, room // unit)
    c = min(range(len(best)), key=lambda i: (best[i], i))
    if best[c] == float("inf"):
        raise AutoBudgetError(f"activation.auto budget {budget_bytes / 2 ** 20:.2f} MiB: no combination fits once "
                              f"sizes are rounded to {unit} B units; raise the budget or the resolution")
    chosen: List[LayerOption] = []
    for prof, pick in zip(reversed(profiles), reversed(picks)):
        opt = prof.options[pick[c]]
        chosen.append(opt)
        c -= -(-opt.memory_bytes // unit)
    chosen.reverse()
    return AutoPlan(choices=tuple((p.name, o.mode) for p, o in zip(profiles, chosen)),
                    predicted_bytes=fixed_bytes + sum(o.memory_bytes for o in chosen),
                    predicted_extra_s=sum(o.time_s for o in chosen), budget_bytes=budget_bytes,
                    fixed_bytes=fixed_bytes, profiles=profiles)
