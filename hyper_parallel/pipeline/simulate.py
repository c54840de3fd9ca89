# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The schedule simulator (pure Python): run the per-rank lists with costs, get timelines and bubbles.

Every rank executes its compute steps in list order; a step starts when its rank is free and its
inputs exist (F of stage s needs F of s-1; I/B of s need I/B of s+1, or F of s on the last stage;
W needs I), plus ``comm_latency`` when the input comes from another rank. Costs are unit-free:
``{"F": 1, "I": 1, "W": 1}`` by default (a full backward B costs I + W, an OVERLAP_F_B costs its
forward plus its backward unless given), or a callable ``(rank, step) -> seconds`` for measured costs.

Bubble terms: ``busy`` = a rank's compute time, ``idle`` = makespan - busy. ``bubble_ratio`` =
idle / busy (the "(p-1)/m" convention: bubble relative to the ideal step), ``idle_fraction`` =
idle / makespan (the share of the step a rank waits).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple, Union

from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["SimulationResult", "simulate_schedule", "DEFAULT_COSTS"]

T = MetaStepType
DEFAULT_COSTS = {"F": 1.0, "I": 1.0, "W": 1.0}
Costs = Union[None, Mapping[str, float], Callable[[int, MetaStep], float]]


@dataclass(frozen=True)
class SimulationResult:
    """Per-rank timelines ``rank -> [(start, end, step)]`` and the derived bubble numbers."""

    timelines: Dict[int, Tuple[Tuple[float, float, MetaStep], ...]]
    makespan: float

    def busy(self, rank: int) -> float:
        """Compute time of ``rank``."""
        return sum(e - s for s, e, _ in self.timelines[rank])

    def idle(self, rank: int) -> float:
        """Waiting time of ``rank`` within the step (makespan - busy)."""
        return self.makespan - self.busy(rank)

    def bubble_ratio(self, rank: Optional[int] = None) -> float:
        """idle / busy of ``rank`` (default: the largest over ranks)."""
        ranks = [rank] if rank is not None else list(self.timelines)
        return max(self.idle(r) / self.busy(r) for r in ranks)

    def idle_fraction(self, rank: Optional[int] = None) -> float:
        """idle / makespan of ``rank`` (default: the largest over ranks)."""
        ranks = [rank] if rank is not None else list(self.timelines)
        return max(self.idle(r) / self.makespan for r in ranks)

    def max_idle(self) -> float:
        """The largest idle time over ranks."""
        return max(self.idle(r) for r in self.timelines)


def _cost_fn(costs: Costs) -> Callable[[int, MetaStep], float]:
    if callable(costs):
        return costs
    table = dict(DEFAULT_COSTS)
    if costs is not None:
        unknown = set(costs) - {"F", "I", "W", "B", "OVERLAP_F_B"}
        if unknown:
            raise ValueError(f"simulate_schedule(costs): unknown keys {sorted(unknown)}; expected F, I, W, B, "
                             "OVERLAP_F_B")
        table.update(costs)
    table.setdefault("B", table["I"] + table["W"])

    def cost(_rank: int, a: MetaStep) -> float:
        if a.type is T.OVERLAP_F_B:
            if "OVERLAP_F_B" in table:
                return table["OVERLAP_F_B"]
            return sum(table[x.type.value] for x in a.sub_steps)
        return table[a.type.value]
    return cost


def _deps(a: MetaStep, num_stages: int) -> List[Tuple[int, MetaStepType, int]]:
    s, mb = a.stage_index, a.microbatch_index
    if a.type is T.F:
        return [(s - 1, T.F, mb)] if s > 0 else []
    if a.type in (T.I, T.B):
        if s == num_stages - 1:
            return [(s, T.F, mb)]
        return [(s + 1, T.I, mb)]
    if a.type is T.W:
        return [(s, T.I, mb)]
    return []


def _start_time(a: MetaStep, r: int, clock: float, done, owner, num_stages: int, latency: float
                ) -> Optional[float]:
    """When ``a`` can start on rank ``r`` (None while an input is missing)."""
    ready = clock
    for leaf in a.leaves():
        for dep in _deps(leaf, num_stages):
            t = done.get(dep)
            if t is None:
                return None
            ready = max(ready, t + (latency if owner[dep[0]] != r else 0.0))
    return ready


def _finish(a: MetaStep, end: float, done) -> None:
    for leaf in a.leaves():
        done[(leaf.stage_index, T.I if leaf.type is T.B else leaf.type, leaf.microbatch_index)] = end
        if leaf.type is T.B:
            done[(leaf.stage_index, T.W, leaf.microbatch_index)] = end


def _stuck(lists, ptr) -> ValueError:
    heads = {r: str(lists[r][ptr[r]]) for r in lists if ptr[r] < len(lists[r])}
    return ValueError(f"simulate_schedule: the lists cannot make progress (heads {heads}); validate first")


def _result(out) -> SimulationResult:
    makespan = max((tl[-1][1] for tl in out.values() if tl), default=0.0)
    return SimulationResult({r: tuple(tl) for r, tl in out.items()}, makespan)


def _run(a: MetaStep, r: int, start: float, cost, clock, out, done) -> None:
    clock[r] = start + cost(r, a)
    out[r].append((start, clock[r], a))
    _finish(a, clock[r], done)


def simulate_schedule(schedule, costs: Costs = None, comm_latency: float = 0.0) -> SimulationResult:
    """Simulate ``schedule`` (a ``Schedule``) and return per-rank timelines (see the module docstring)."""
    cost = _cost_fn(costs)
    lists = {r: schedule.steps(r) for r in range(schedule.num_ranks)}
    done: Dict[Tuple[int, MetaStepType, int], float] = {}
    clock = {r: 0.0 for r in lists}
    ptr = {r: 0 for r in lists}
    out: Dict[int, List[Tuple[float, float, MetaStep]]] = {r: [] for r in lists}
    while any(ptr[r] < len(lists[r]) for r in lists):
        progress = False
        for r in lists:
            while ptr[r] < len(lists[r]):
                a = lists[r][ptr[r]]
                start = _start_time(a, r, clock[r], done, schedule.stage_to_rank, schedule.num_stages,
                                    comm_latency)
                if start is None:
                    break
                _run(a, r, start, cost, clock, out, done)
                ptr[r] += 1
                progress = True
        if not progress:
            raise _stuck(lists, ptr)
    return _result(out)
