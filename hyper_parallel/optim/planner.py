# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Who orthogonalises which matrix: the work-distribution planner of the sharded Muon (pure Python).

Newton–Schulz orthogonalisation needs the whole matrix, but a sharded parameter's update lives in
pieces on several ranks. The planner turns the layouts of all Muon parameters into *work units*:

* A parameter's last two dims are the matrix; leading dims are a batch (3-D expert weights
  ``[E, rows, cols]`` are ``E`` matrices). Mesh dims of size > 1 are classified: ``B`` shard a
  batch dim, ``M`` shard a matrix dim, ``R`` replicate. (``Partial`` is not a parameter layout.)
* Ranks with equal ``B`` coordinates form a *cell*: together they hold whole matrices (a sub-batch).
  A cell of one rank (pure expert parallelism, a plain tensor) is orthogonalised where it lives.
* A bigger cell is split along dim 0 of its batch into at most ``len(cell)`` near-equal chunks; each is
  one unit, orthogonalised by one *owner* rank of the cell. The *sources* (one rank per distinct
  piece: replica coordinate 0 on every ``R`` dim) send their pieces to the owner; the owner sends
  each cell member (replicas included) its piece of the result.
* Owners are chosen by longest-processing-time-first over the counted Newton–Schulz FLOPs
  (:func:`ns_flops`), then improved by moving or swapping units away from the busiest rank while
  that lowers its load, so every rank gets a size-balanced, disjoint subset and no rank computes
  every matrix. Units that stay local count towards their rank's load before the balancing.

Everything is deterministic in the inputs, so every rank computes the same plan from the same
layouts. Regions are tuples of ``(start, length)`` per tensor dim in global coordinates.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.core.spec import _local_shape_and_offset

__all__ = ["ns_flops", "TensorLayout", "WorkUnit", "WorkPlan", "plan_work", "Region", "intersect"]

Region = Tuple[Tuple[int, int], ...]


def ns_flops(rows: int, cols: int, steps: int) -> int:
    """Counted FLOPs of ``steps`` Newton–Schulz iterations on one ``rows x cols`` matrix.

    With ``m = min(rows, cols)`` and ``n = max(rows, cols)`` (tall matrices are transposed first)
    one iteration is ``A = X X^T`` (2 m^2 n), ``B = b A + c A A`` (2 m^3) and ``X = a X + B X``
    (2 m^2 n): ``4 m^2 n + 2 m^3``.
    """
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m ** 3)


@dataclass(frozen=True)
class TensorLayout:
    """Where one parameter lives: its global shape and, when distributed, its mesh and placements.

    Args:
        shape: global shape (at least 2 dims: the last two are the matrix).
        mesh_shape: size of every mesh dim (``(1,)`` for a plain tensor).
        ranks: global ranks of the mesh in row-major order.
        placements: one ``Shard``/``Replicate`` per mesh dim.
        local: a plain tensor held (identically or not) by this rank only; orthogonalised locally
            and left out of the balancing (other ranks cannot know about it).
    """

    shape: Tuple[int, ...]
    mesh_shape: Tuple[int, ...] = (1,)
    ranks: Tuple[int, ...] = (0,)
    placements: Tuple[Placement, ...] = (Replicate(),)
    local: bool = False

    @staticmethod
    def plain(shape: Sequence[int], rank: int) -> "TensorLayout":
        """Layout of a plain (not distributed) tensor on ``rank``."""
        return TensorLayout(tuple(int(s) for s in shape), (1,), (int(rank),), (Replicate(),), True)


@dataclass(frozen=True)
class WorkUnit:
    """One batch of whole matrices orthogonalised by one rank.

    Attributes:
        item: index of the parameter in the planned list.
        region: the global region orthogonalised (a dim-0 range of the batch x the whole matrix).
        owner: global rank that orthogonalises it.
        sources: ``(rank, region)`` pieces sent to the owner; they tile ``region``.
        targets: ``(rank, region)`` pieces of the result each holder receives back.
        flops: counted Newton–Schulz FLOPs (:func:`ns_flops` times the number of matrices).
        group: global ranks of the parameter's mesh (the communication group).
    """

    item: int
    region: Region
    owner: int
    sources: Tuple[Tuple[int, Region], ...]
    targets: Tuple[Tuple[int, Region], ...]
    flops: int
    group: Tuple[int, ...]

    @property
    def matrices(self) -> int:
        """Number of matrices in the unit."""
        n = 1
        for _, length in self.region[:-2]:
            n *= length
        return n

    @property
    def is_local(self) -> bool:
        """True when the owner holds the whole unit and nobody else needs it (no communication)."""
        return all(r == self.owner for r, _ in self.sources) and all(r == self.owner for r, _ in self.targets)


@dataclass(frozen=True)
class WorkPlan:
    """All units of one optimizer's Muon parameters plus the per-rank counted FLOPs."""

    units: Tuple[WorkUnit, ...]
    loads: Dict[int, int] = field(default_factory=dict)

    def owned_by(self, rank: int) -> List[WorkUnit]:
        """Units ``rank`` orthogonalises."""
        return [u for u in self.units if u.owner == rank]

    def imbalance(self, ranks: Optional[Iterable[int]] = None) -> float:
        """Largest load over the mean load of ``ranks`` (default: every rank with a load); 1.0 is perfect."""
        ranks = sorted(self.loads) if ranks is None else list(ranks)
        values = [self.loads.get(r, 0) for r in ranks]
        mean = sum(values) / len(values) if values else 0.0
        return max(values) / mean if mean else 1.0

    def digest(self) -> Tuple[Tuple[int, Region, int], ...]:
        """``(item, region, owner)`` of every unit: equal on every rank of a consistent plan."""
        return tuple((u.item, u.region, u.owner) for u in self.units)


def intersect(a: Region, b: Region) -> Optional[Region]:
    """The overlap of two regions, or None when it is empty."""
    out = []
    for (s0, l0), (s1, l1) in zip(a, b):
        lo, hi = max(s0, s1), min(s0 + l0, s1 + l1)
        if hi <= lo:
            return None
        out.append((lo, hi - lo))
    return tuple(out)


def _classify(layout: TensorLayout, what: str) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(batch-sharding mesh dims, replicating mesh dims) of size > 1."""
    ndim = len(layout.shape)
    if ndim < 2:
        raise ValueError(f"{what}: Muon orthogonalises matrices; got a {ndim}-D parameter of shape "
                         f"{tuple(layout.shape)} (give 0-D/1-D parameters to AdamW)")
    if len(layout.placements) != len(layout.mesh_shape):
        raise ValueError(f"{what}: {len(layout.placements)} placements for a {len(layout.mesh_shape)}-D mesh")
    batch_dims, rep_dims = [], []
    for d, (p, size) in enumerate(zip(layout.placements, layout.mesh_shape)):
        if isinstance(p, Shard):
            if size > 1 and p.dim < ndim - 2:
                batch_dims.append(d)
        elif isinstance(p, Replicate):
            if size > 1:
                rep_dims.append(d)
        else:
            raise ValueError(f"{what}: placement {p} on mesh dim {d}; a parameter must be Shard or Replicate")
    return tuple(batch_dims), tuple(rep_dims)


def _cells(layout: TensorLayout, what: str):
    """Cells of one layout: ``{B-coordinate: [(rank, region, is_source), ...]}`` in mesh order."""
    batch_dims, rep_dims = _classify(layout, what)
    shape = tuple(layout.shape)
    cells: Dict[tuple, list] = {}
    for flat, coord in enumerate(itertools.product(*(range(s) for s in layout.mesh_shape))):
        local, offset = _local_shape_and_offset(shape, tuple(layout.placements), tuple(layout.mesh_shape), coord)
        region = tuple(zip(offset, local))
        source = all(coord[d] == 0 for d in rep_dims)
        cells.setdefault(tuple(coord[d] for d in batch_dims), []).append((layout.ranks[flat], region, source))
    return cells


def _chunks(batch: Region, parts: int) -> List[Region]:
    """``parts`` near-equal ranges of the first batch dim (the rest of the batch whole); ``[()]`` for a matrix."""
    if not batch:
        return [()]
    (start0, n0), rest = batch[0], batch[1:]
    base, extra = divmod(n0, parts)
    return [((start0 + i * base + min(i, extra), base + (i < extra)),) + rest for i in range(parts)]


def _unit(item: int, members, dims: Region, shape: Tuple[int, ...], per_matrix: int, group) -> Tuple[WorkUnit, tuple]:
    region = dims + ((0, shape[-2]), (0, shape[-1]))
    sources, targets = [], []
    for r, reg, is_source in members:
        hit = intersect(reg, region)
        if hit is not None:
            targets.append((r, hit))
            if is_source:
                sources.append((r, hit))
    count = 1
    for _, n in dims:
        count *= n
    holders = tuple(r for r, _ in targets)  # ranks holding a non-empty piece: the candidate owners
    return WorkUnit(item, region, holders[0], tuple(sources), tuple(targets), per_matrix * count, group), holders


def _units_of(item: int, layout: TensorLayout, steps: int, what: str) -> List[Tuple[WorkUnit, Tuple[int, ...]]]:
    """Units of one parameter with their candidate owners (owner field is a placeholder)."""
    cells = _cells(layout, what)
    shape = tuple(layout.shape)
    if shape[-1] == 0 or shape[-2] == 0:
        return []
    per_matrix = ns_flops(shape[-2], shape[-1], steps)
    out = []
    for members in cells.values():
        batch = members[0][1][:-2]
        if any(n == 0 for _, n in batch):
            continue  # nothing to orthogonalise in this cell
        holding = [r for r, reg, _ in members if all(n for _, n in reg)]
        parts = min(len(holding), batch[0][1]) if batch else 1
        for dims in _chunks(batch, parts):
            out.append(_unit(item, members, dims, shape, per_matrix, tuple(layout.ranks)))
    return out


def _best_relief(pending, loads, by_owner, r):
    """``(unit, new owner, swapped unit or None)`` lowering the load of the busiest rank ``r`` most; None if
    no move or swap lowers it."""
    best, best_peak = None, loads[r]
    for i in by_owner[r]:
        unit, candidates = pending[i]
        for c in candidates:
            if c == r:
                continue
            peak = max(loads[r] - unit.flops, loads[c] + unit.flops)
            if peak < best_peak:
                best, best_peak = (i, c, None), peak
            for j in by_owner[c]:
                other, other_candidates = pending[j]
                delta = unit.flops - other.flops
                if delta <= 0 or r not in other_candidates:
                    continue
                peak = max(loads[r] - delta, loads[c] + delta)
                if peak < best_peak:
                    best, best_peak = (i, c, j), peak
    return best


def _refine(pending, owners: List[int], loads: Dict[int, int]) -> None:
    """Improve the greedy placement: move or swap units away from the busiest rank while that lowers its
    load below where it was. Each accepted change lowers the sum of squared loads, so this terminates."""
    by_owner: Dict[int, List[int]] = {r: [] for r in loads}
    for i, o in enumerate(owners):
        by_owner[o].append(i)
    for _ in range(4 * len(pending)):
        r = max(sorted(loads), key=lambda x: loads[x])
        best = _best_relief(pending, loads, by_owner, r)
        if best is None:
            return
        i, c, j = best
        for k, src, dst in ((i, r, c),) + (((j, c, r),) if j is not None else ()):
            loads[src] -= pending[k][0].flops
            loads[dst] += pending[k][0].flops
            by_owner[src].remove(k)
            by_owner[dst].append(k)
            owners[k] = dst


def plan_work(layouts: Sequence[TensorLayout], ns_steps: Sequence[int], names: Optional[Sequence[str]] = None
              ) -> WorkPlan:
    """Plan the orthogonalisation of every parameter (see the module docstring).

    Args:
        layouts: one :class:`TensorLayout` per Muon parameter, in optimizer order.
        ns_steps: Newton–Schulz steps of each parameter (its param group's ``ns_steps``).
        names: optional parameter names for error messages.
    """
    if len(ns_steps) != len(layouts):
        raise ValueError(f"plan_work: {len(ns_steps)} ns_steps for {len(layouts)} layouts")
    loads: Dict[int, int] = {}
    fixed: List[WorkUnit] = []
    pending: List[Tuple[WorkUnit, Tuple[int, ...]]] = []
    plain: List[WorkUnit] = []
    for i, layout in enumerate(layouts):
        what = f"Muon parameter {names[i]!r}" if names else f"Muon parameter {i}"
        for unit, candidates in _units_of(i, layout, int(ns_steps[i]), what):
            for r in unit.group:
                loads.setdefault(r, 0)
            if layout.local:
                plain.append(unit)
            elif len(candidates) == 1:
                fixed.append(unit)
                loads[unit.owner] += unit.flops
            else:
                pending.append((unit, candidates))
    pending.sort(key=lambda uc: (-uc[0].flops, uc[0].item, uc[0].region))
    owners = []
    for unit, candidates in pending:
        owner = min(candidates, key=lambda r: (loads[r], r))
        loads[owner] += unit.flops
        owners.append(owner)
    _refine(pending, owners, loads)
    placed = [WorkUnit(u.item, u.region, o, u.sources, u.targets, u.flops, u.group)
              for (u, _), o in zip(pending, owners)]
    for unit in plain:
        loads[unit.owner] += unit.flops
    units = sorted(fixed + placed + plain, key=lambda u: (u.item, u.region))
    return WorkPlan(tuple(units), loads)
