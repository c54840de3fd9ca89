# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Stages on meshes of different sizes (pure Python): where each pipeline position's ranks are and how a
tensor crosses a boundary between two positions with different rank sets.

A *position* is what a schedule calls a rank: the schedule places stages on positions, and every rank of a
position runs that position's action list. With one rank per position this is ordinary pipelining. A
position may hold several ranks (its stages then run on a ``DeviceMesh`` over them, with TP for
instance): a tensor crossing to a position with another rank set moves by the cross-mesh redistribute
planner (:func:`hyper_parallel.core.cross_mesh.plan_cross_mesh`): the sender's layout (its DTensor spec,
or ``Replicate`` on its one rank for a plain tensor) to the receiver's layout (its stage mesh and
``input_placements``, ``Replicate`` by default), as point-to-point blocks. Gradients go back by the
adjoint copy (the receiver's gradient layout to the sender's, ``Partial`` read as ``Replicate``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from hyper_parallel.core.cross_mesh import Piece, plan_cross_mesh
from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.placement import Partial, Placement, Replicate
from hyper_parallel.core.spec import DTensorSpec

__all__ = ["StageLayout", "BoundaryPlan", "plan_boundary", "position_ranks", "layout_spec"]


@dataclass(frozen=True)
class StageLayout:
    """Where a stage runs: its mesh topology (None: one rank, plain tensors) and the placements its
    inputs take on that mesh (None: ``Replicate`` on every mesh dim)."""

    topology: Optional[MeshTopology]
    input_placements: Optional[Tuple[Placement, ...]]

    def placements(self) -> Tuple[Placement, ...]:
        """The input placements (default ``Replicate`` on every mesh dim)."""
        if self.input_placements is not None:
            return tuple(self.input_placements)
        return tuple(Replicate() for _ in range(self.topology.ndim if self.topology is not None else 1))


@dataclass(frozen=True)
class BoundaryPlan:
    """One tensor crossing from stage ``s`` to stage ``s + 1``: the specs on both sides, the blocks of the
    forward copy and of its adjoint (global offsets / shapes, global ranks)."""

    src: DTensorSpec
    dst: DTensorSpec
    fwd: Tuple[Piece, ...]
    bwd: Tuple[Piece, ...]


def position_ranks(infos: Dict[int, int], stage_to_position: Sequence[int]) -> Dict[int, Tuple[int, ...]]:
    """Position -> its global ranks (sorted), from ``infos`` (global rank -> a stage index it holds)."""
    out: Dict[int, set] = {}
    for rank, stage in infos.items():
        out.setdefault(stage_to_position[stage], set()).add(rank)
    return {p: tuple(sorted(r)) for p, r in out.items()}


def layout_spec(layout, local_shape: Sequence[int], ranks: Sequence[int], what: str) -> DTensorSpec:
    """The spec of a tensor leaving a stage: its DTensor layout ``(mesh shape, ranks, dim names, placements,
    global shape)``, or, for a plain tensor, ``Replicate`` on the stage's one rank."""
    if layout is not None:
        shape, mesh_ranks, names, placements, global_shape = layout
        placements = tuple(Replicate() if isinstance(p, Partial) else p for p in placements)
        return DTensorSpec(MeshTopology(shape, mesh_ranks, names), placements, global_shape)
    if len(ranks) != 1:
        raise ValueError(f"{what}: a plain tensor leaves a stage that runs on ranks {list(ranks)}; a stage on "
                         "several ranks must return DTensors at a boundary to a stage on other ranks (a plain "
                         "tensor does not say how its copies relate)")
    return DTensorSpec(MeshTopology((1,), tuple(ranks)), (Replicate(),), tuple(local_shape))


def _grad(spec: DTensorSpec) -> DTensorSpec:
    return DTensorSpec(spec.mesh, tuple(Replicate() if isinstance(p, Partial) else p for p in spec.placements),
                       spec.shape)


def plan_boundary(src: DTensorSpec, dst: StageLayout, dst_ranks: Sequence[int], itemsize: int,
                  what: str) -> BoundaryPlan:
    """Plan one tensor's crossing from ``src`` to the receiving stage's layout ``dst`` (on ``dst_ranks``)."""
    topo = dst.topology
    if topo is None:
        if len(dst_ranks) != 1:
            raise ValueError(f"{what}: the receiving stage runs on ranks {list(dst_ranks)} but has no "
                             "device_mesh; pass PipelineStage(device_mesh=...) on each of them")
        topo = MeshTopology((1,), tuple(dst_ranks))
    elif tuple(sorted(topo.ranks)) != tuple(sorted(dst_ranks)):
        raise ValueError(f"{what}: the receiving stage's device_mesh holds ranks {list(topo.ranks)} but the "
                         f"stage runs on ranks {list(dst_ranks)}; a stage's mesh must hold exactly its ranks")
    fwd = plan_cross_mesh(src, topo, dst.placements(), itemsize)
    back = plan_cross_mesh(_grad(fwd.dst), src.mesh, _grad(src).placements, itemsize)
    return BoundaryPlan(src, fwd.dst, fwd.pieces, back.pieces)
