# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The redistribute planner (pure Python): source spec + target placements -> ordered steps.

Every step changes the placement of one mesh dimension and maps to one collective::

    S(i) -> R      all_gather        R    -> S(i)  local_chunk (no communication)
    S(i) -> S(j)   all_to_all        P    -> R     all_reduce
    P    -> S(i)   reduce_scatter    R    -> P     local_partial (no communication)

Nested sharding (one tensor dim sharded by several mesh dims) applies in mesh-dim order, so a
step is only legal when it touches the innermost mesh dim of the tensor dims involved. Among the
legal orders the planner picks the one that moves the fewest bytes (Dijkstra over the at most
``3 ** mesh.ndim`` intermediate states), with the standard ring formulas per rank::

    all_gather      (n - 1) * B_in          reduce_scatter  (n - 1) / n * B_in
    all_to_all      (n - 1) / n * B_in      all_reduce      2 (n - 1) / n * B_in

where ``B_in`` is the byte size of the (largest, i.e. padded) local shard before the step.
Plans are cached by (source spec, target placements, item size). Moves to a mesh with another rank
set are planned by ``core/cross_mesh.py`` (``explain_redistribute(..., device_mesh=other)``).
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import List, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec, normalize_placements

__all__ = ["RedistStep", "RedistPlan", "plan_redistribute", "explain_redistribute"]

LOCAL_COLLECTIVES = frozenset({"local_chunk", "local_partial"})


@dataclass(frozen=True)
class RedistStep:
    """One mesh-dim transition of a redistribution."""

    mesh_dim: int
    src: Placement
    dst: Placement
    collective: str
    bytes_moved: int
    group_size: int

    def describe(self) -> str:
        """``mesh dim 0: S(0) -> R  all_gather  (4.0 MiB)``."""
        return (f"mesh dim {self.mesh_dim}: {self.src.short()} -> {self.dst.short()}  "
                f"{self.collective}  ({_fmt_bytes(self.bytes_moved)})")


@dataclass(frozen=True)
class RedistPlan:
    """The ordered steps from ``src`` to ``dst`` and their total bytes per rank."""

    src: DTensorSpec
    dst: DTensorSpec
    steps: Tuple[RedistStep, ...]

    @property
    def total_bytes(self) -> int:
        """Bytes sent per rank, summed over steps (ring formulas)."""
        return sum(s.bytes_moved for s in self.steps)

    @property
    def collectives(self) -> Tuple[str, ...]:
        """Names of the collectives used, in order (``()`` for a no-op)."""
        return tuple(s.collective for s in self.steps)

    def __str__(self) -> str:
        head = (f"{_pl(self.src.placements)} -> {_pl(self.dst.placements)} on mesh {tuple(self.src.mesh.shape)}"
                f", shape {list(self.src.shape)}: ")
        if not self.steps:
            return head + "no-op"
        return head + "; ".join(s.describe() for s in self.steps) + f"; total {_fmt_bytes(self.total_bytes)}"


def _pl(placements: Sequence[Placement]) -> str:
    return "[" + ", ".join(p.short() for p in placements) + "]"


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _innermost(placements: Tuple[Placement, ...], tensor_dim: int, skip: int = -1) -> int:
    """Largest mesh dim (other than ``skip``) that shards ``tensor_dim``; -1 if none."""
    best = -1
    for d, p in enumerate(placements):
        if d != skip and isinstance(p, Shard) and p.dim == tensor_dim:
            best = d
    return best


def _transition(cur: Tuple[Placement, ...], d: int, dst: Placement):
    """Collective name for changing mesh dim ``d`` of ``cur`` to ``dst``; None when illegal."""
    src = cur[d]
    if isinstance(src, Shard) and _innermost(cur, src.dim) != d:
        return None  # only the innermost mesh dim of a tensor dim may be unsharded
    if isinstance(dst, Shard) and _innermost(cur, dst.dim, skip=d) > d:
        return None  # a new shard must become the innermost one
    if isinstance(src, Shard):
        if isinstance(dst, Replicate):
            return "all_gather"
        if isinstance(dst, Shard):
            return "all_to_all"
        return None
    if isinstance(src, Partial):
        if isinstance(dst, Replicate):
            return "all_reduce"
        if isinstance(dst, Shard):
            return "reduce_scatter"
        return None
    if isinstance(dst, Shard):
        return "local_chunk"
    if isinstance(dst, Partial):
        return "local_partial"
    return None


def _step_bytes(collective: str, n: int, in_bytes: int) -> int:
    if collective == "all_gather":
        return (n - 1) * in_bytes
    if collective == "all_reduce":
        return 2 * (n - 1) * in_bytes // n
    if collective in ("reduce_scatter", "all_to_all"):
        return (n - 1) * in_bytes // n
    return 0


@lru_cache(maxsize=8192)
def _plan_cached(src: DTensorSpec, dst_placements: Tuple[Placement, ...], itemsize: int) -> RedistPlan:
    mesh_shape = tuple(src.mesh.shape)
    start = src.placements
    if start == dst_placements:
        return RedistPlan(src, src, ())
    options = [tuple(dict.fromkeys((start[d], dst_placements[d], Replicate()))) for d in range(len(start))]
    counter = itertools.count()
    # (cost, steps taken, tie-breaker, state, path)
    heap = [(0, 0, next(counter), start, ())]
    best = {start: (0, 0)}
    while heap:
        cost, nsteps, _, state, path = heapq.heappop(heap)
        if state == dst_placements:
            dst_spec = DTensorSpec(src.mesh, dst_placements, src.shape, validated=True)
            return RedistPlan(src, dst_spec, path)
        if best.get(state, (cost, nsteps)) < (cost, nsteps):
            continue
        in_bytes = DTensorSpec(src.mesh, state, src.shape, validated=True).max_local_numel() * itemsize
        for d, choices in enumerate(options):
            for target in choices:
                if target == state[d]:
                    continue
                coll = _transition(state, d, target)
                if coll is None:
                    continue
                b = _step_bytes(coll, mesh_shape[d], in_bytes)
                nxt = state[:d] + (target,) + state[d + 1:]
                key = (cost + b, nsteps + 1)
                if key < best.get(nxt, (float("inf"), 0)):
                    best[nxt] = key
                    step = RedistStep(d, state[d], target, coll, b, mesh_shape[d])
                    heapq.heappush(heap, (key[0], key[1], next(counter), nxt, path + (step,)))
    raise ValueError(f"no redistribution path from {_pl(start)} to {_pl(dst_placements)}")  # unreachable


def plan_redistribute(src: DTensorSpec, dst_placements: Sequence[Placement], itemsize: int = 4) -> RedistPlan:
    """The cheapest legal sequence of steps turning ``src`` into ``dst_placements`` (cached)."""
    dst_placements = normalize_placements(dst_placements, src.mesh.ndim, src.ndim, "target placements")
    return _plan_cached(src, dst_placements, itemsize)


def explain_redistribute(src: DTensorSpec, dst_placements: Sequence[Placement], itemsize: int = 4) -> RedistPlan:
    """Return the plan (steps with their collectives and byte counts) without running it, on ``src``'s mesh.

    ``print(explain_redistribute(spec, [Replicate()]))`` shows a one-line summary; ``.steps``
    holds the individual ``RedistStep`` objects. ``hyper_parallel.explain_redistribute``
    (``core/cross_mesh.py``) also plans onto a mesh with another rank set (``device_mesh=``).
    """
    return plan_redistribute(src, dst_placements, itemsize)


def plan_table(plans: List[RedistPlan]) -> str:
    """A fixed-width table of several plans (used by the demo and benchmarks)."""
    rows = [("from", "to", "collectives", "bytes/rank")]
    for p in plans:
        rows.append((_pl(p.src.placements), _pl(p.dst.placements), " + ".join(p.collectives) or "no-op",
                     _fmt_bytes(p.total_bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)
