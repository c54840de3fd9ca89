# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Cross-mesh redistribute planner (pure Python): move a DTensor to a mesh with another rank set.

A plan has at most two parts, chosen by bytes like every other redistribute step:

1. an in-mesh step on the source mesh that removes ``Partial`` placements (``Partial`` data is not yet
   the tensor, so it cannot be copied piecewise): every ``Partial`` mesh dim becomes ``Replicate`` or
   a ``Shard``; among those candidates the planner takes the one with the fewest total bytes
   (in-mesh step + copy);
2. a piecewise copy: every destination rank receives the intersection of its shard with the source
   shards; a region held by several source ranks (``Replicate``) is read from the destination rank
   itself when it holds it (no transfer), else from the holders in turn (spreading the load). Bytes
   counted are those crossing between two different ranks.

Its adjoint is the copy in the other direction (destination gradient -> source layout with every
``Partial`` read as ``Replicate``, the gradient convention of ``Partial(sum)``), followed by the
in-mesh step's own adjoint.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.redistribute_plan import RedistPlan, _fmt_bytes, _pl, plan_redistribute
from hyper_parallel.core.spec import DTensorSpec, normalize_placements

__all__ = ["Piece", "CrossMeshPlan", "plan_cross_mesh", "mesh_ranks", "explain_redistribute"]


@dataclass(frozen=True)
class Piece:
    """One block copied from ``src`` to ``dst`` (global ranks): ``offset`` / ``shape`` in global indices."""

    src: int
    dst: int
    offset: Tuple[int, ...]
    shape: Tuple[int, ...]

    @property
    def numel(self) -> int:
        """Elements of the block."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class CrossMeshPlan:
    """``pre`` (in-mesh plan on the source mesh, or None) then the ``pieces`` of the copy."""

    src: DTensorSpec
    dst: DTensorSpec
    pre: Optional[RedistPlan]
    pieces: Tuple[Piece, ...]
    itemsize: int

    @property
    def copy_bytes(self) -> int:
        """Bytes crossing between two different ranks in the copy."""
        return sum(p.numel for p in self.pieces if p.src != p.dst) * self.itemsize

    @property
    def total_bytes(self) -> int:
        """In-mesh step bytes (per rank, ring formulas) plus copy bytes (all ranks)."""
        return (self.pre.total_bytes if self.pre is not None else 0) + self.copy_bytes

    @property
    def collectives(self) -> Tuple[str, ...]:
        """The in-mesh collectives, then ``cross_mesh_copy`` (``()`` for a no-op)."""
        pre = self.pre.collectives if self.pre is not None else ()
        return pre + (("cross_mesh_copy",) if any(p.src != p.dst for p in self.pieces) else ())

    def __str__(self) -> str:
        head = (f"{_pl(self.src.placements)} on ranks {list(mesh_ranks(self.src.mesh))} -> "
                f"{_pl(self.dst.placements)} on ranks {list(mesh_ranks(self.dst.mesh))}, "
                f"shape {list(self.src.shape)}: ")
        parts = []
        if self.pre is not None and self.pre.steps:
            parts.append("on the source mesh " + "; ".join(s.describe() for s in self.pre.steps))
        moved = [p for p in self.pieces if p.src != p.dst]
        pairs = sorted({(p.src, p.dst) for p in moved})
        parts.append(f"cross_mesh_copy of {len(moved)} block(s) over rank pairs {pairs} "
                     f"({_fmt_bytes(self.copy_bytes)})" if moved else "local copies only (0 B)")
        return head + "; ".join(parts) + f"; total {_fmt_bytes(self.total_bytes)}"


def mesh_ranks(mesh) -> Tuple[int, ...]:
    """Global ranks of a DeviceMesh or MeshTopology in row-major order."""
    topo = getattr(mesh, "topology", mesh)
    return tuple(topo.ranks)


def _coords(mesh):
    topo = getattr(mesh, "topology", mesh)
    return [(r, topo.coordinate_of(r)) for r in topo.ranks]


def _regions(spec: DTensorSpec):
    return [(r, spec.local_shape_and_offset(c)) for r, c in _coords(spec.mesh)]


def _copy_pieces(src: DTensorSpec, dst: DTensorSpec) -> Tuple[Piece, ...]:
    holders = {}
    for r, (shape, off) in _regions(src):
        holders.setdefault((off, shape), []).append(r)
    pieces: List[Piece] = []
    turn = 0
    for d, (dshape, doff) in _regions(dst):
        for (soff, sshape), ranks in holders.items():
            lo = tuple(max(a, b) for a, b in zip(soff, doff))
            hi = tuple(min(a + x, b + y) for a, x, b, y in zip(soff, sshape, doff, dshape))
            shape = tuple(max(0, h - l) for l, h in zip(lo, hi))
            if any(s == 0 for s in shape):  # no overlap (or an empty shard: nothing to move)
                continue
            src_rank = d if d in ranks else ranks[turn % len(ranks)]
            turn += src_rank != d
            pieces.append(Piece(src_rank, d, lo, shape))
    return tuple(pieces)


def _candidates(src: DTensorSpec) -> List[Tuple[Placement, ...]]:
    options = []
    for p in src.placements:
        if isinstance(p, Partial):
            options.append([Replicate()] + [Shard(d) for d in range(src.ndim)])
        else:
            options.append([p])
    return [tuple(c) for c in itertools.product(*options)]


def plan_cross_mesh(src: DTensorSpec, dst_mesh, dst_placements: Sequence[Placement], itemsize: int = 4
                    ) -> CrossMeshPlan:
    """The cheapest plan moving ``src`` to ``dst_placements`` on ``dst_mesh`` (see the module docstring)."""
    dst_placements = normalize_placements(dst_placements, dst_mesh.ndim, src.ndim, "target placements")
    if any(isinstance(p, Partial) for p in dst_placements):
        raise ValueError(f"cross-mesh redistribute: target placements {_pl(dst_placements)} hold a Partial; move "
                         "to Replicate or Shard across meshes, then make it Partial on the target mesh")
    dst = DTensorSpec(dst_mesh, dst_placements, src.shape, validated=True)
    best = None
    for cand in _candidates(src):
        try:
            pre = plan_redistribute(src, cand, itemsize) if cand != src.placements else None
        except ValueError:
            continue
        mid = pre.dst if pre is not None else src
        plan = CrossMeshPlan(src, dst, pre, _copy_pieces(mid, dst), itemsize)
        if best is None or plan.total_bytes < best.total_bytes:
            best = plan
    return best


def explain_redistribute(src: DTensorSpec, dst_placements: Sequence[Placement], itemsize: int = 4, *,
                         device_mesh=None):
    """Return the plan (steps with their collectives and byte counts) without running it.

    ``print(explain_redistribute(spec, [Replicate()]))`` shows a one-line summary; ``.steps``
    holds the individual ``RedistStep`` objects. With ``device_mesh`` (a mesh with another rank set)
    it returns the cross-mesh plan (:class:`CrossMeshPlan`).
    """
    if device_mesh is not None and device_mesh != src.mesh:
        return plan_cross_mesh(src, device_mesh, dst_placements, itemsize)
    return plan_redistribute(src, dst_placements, itemsize)
