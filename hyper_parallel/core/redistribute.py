# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-free execution of redistribute plans.

A plan (from the pure planner) is compiled once per (source spec, target placements, mesh
coordinate) into a tuple of bound steps — collective name, group, dims, chunk sizes, this rank's
index — so running it again costs only the collectives themselves.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, Tuple

from hyper_parallel.core import process_group as _pg
from hyper_parallel.core.placement import Placement, Replicate, chunk_sizes
from hyper_parallel.core.redistribute_plan import RedistPlan, plan_redistribute
from hyper_parallel.core.spec import DTensorSpec

__all__ = ["compile_plan", "run_redistribute", "CompiledStep"]

CompiledStep = Tuple[Callable[..., Any], tuple]
_COMPILED: Dict[tuple, Tuple[DTensorSpec, Tuple[CompiledStep, ...], RedistPlan]] = {}
# compiled steps hold process groups: drop them with the groups (destroy_process_group)
_pg.ON_DESTROY.append(_COMPILED.clear)


def _level_size(placements: Tuple[Placement, ...], spec: DTensorSpec, mesh_dim: int, tensor_dim: int,
                coord: Tuple[int, ...]) -> int:
    """Size of ``tensor_dim`` just before mesh dim ``mesh_dim`` splits it (outer splits applied)."""
    probe = placements[:mesh_dim] + (Replicate(),) + placements[mesh_dim + 1:]
    return DTensorSpec(spec.mesh, probe, spec.shape, validated=True).local_shape(coord)[tensor_dim]


def _compile_step(platform, step, placements, spec, coord, mesh, grad_partial_dims):  # pylint: disable=too-many-arguments
    d = step.mesh_dim
    n = mesh.shape[d]
    idx = coord[d]
    group = mesh.get_group(d)
    kind = step.collective
    if kind == "all_gather":
        t = step.src.dim
        sizes = chunk_sizes(_level_size(placements, spec, d, t, coord), n)
        return platform.all_gather, (group, t, sizes, idx, d in grad_partial_dims)
    if kind == "local_chunk":
        t = step.dst.dim
        sizes = chunk_sizes(_level_size(placements, spec, d, t, coord), n)
        return platform.chunk, (t, sizes, idx, group)
    if kind == "all_to_all":
        c, s = step.src.dim, step.dst.dim
        concat_sizes = chunk_sizes(_level_size(placements, spec, d, c, coord), n)
        split_sizes = chunk_sizes(_level_size(placements, spec, d, s, coord), n)
        return platform.all_to_all, (group, s, c, split_sizes, concat_sizes, idx)
    if kind == "all_reduce":
        return platform.all_reduce, (step.src.reduce_op, group)
    if kind == "reduce_scatter":
        t = step.dst.dim
        sizes = chunk_sizes(_level_size(placements, spec, d, t, coord), n)
        return platform.reduce_scatter, (step.src.reduce_op, group, t, sizes, idx)
    if kind == "local_partial":
        return platform.make_partial, (step.dst.reduce_op, idx, n)
    raise ValueError(f"unknown redistribute step {kind!r}")


def compile_plan(platform, spec: DTensorSpec, dst_placements: Tuple[Placement, ...], itemsize: int,
                 grad_partial_dims: FrozenSet[int] = frozenset()):
    """(target spec, compiled steps, plan) for moving ``spec`` to ``dst_placements`` on this rank (cached)."""
    key = (spec, dst_placements, itemsize, grad_partial_dims)
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    mesh = spec.mesh
    coord = mesh.get_coordinate()
    if coord is None:
        raise RuntimeError(f"redistribute: this rank is not part of {mesh}")
    plan = plan_redistribute(spec, dst_placements, itemsize)
    placements = spec.placements
    steps = []
    for step in plan.steps:
        steps.append(_compile_step(platform, step, placements, spec, coord, mesh, grad_partial_dims))
        placements = placements[:step.mesh_dim] + (step.dst,) + placements[step.mesh_dim + 1:]
    hit = (plan.dst, tuple(steps), plan)
    _COMPILED[key] = hit
    return hit


def run_redistribute(local: Any, steps: Tuple[CompiledStep, ...]) -> Any:
    """Apply compiled steps to a local tensor."""
    for fn, args in steps:
        local = fn(local, *args)
    return local
