# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the redistribute planner, checked by simulating every rank in one process.

The simulator keeps one local tensor per mesh coordinate and applies each planned step with plain
torch ops (gather = cat of the group's chunks, reduce = sum over the group, ...). The final locals
must equal the shards that the target spec prescribes, for every placement pair on 1-D and 2-D
meshes, even and uneven shapes.
"""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.placement import chunk_sizes
from hyper_parallel.core.redistribute_plan import explain_redistribute, plan_redistribute, plan_table
from hyper_parallel.core.spec import DTensorSpec


def expected_locals(full, spec):
    """What each coordinate must hold for ``spec`` (Partial(sum): coordinate 0 holds it all)."""
    out = {}
    topo = spec.mesh
    for r in topo.ranks:
        coord = topo.coordinate_of(r)
        local, offset = spec.local_shape_and_offset(coord)
        t = full
        for dim, (o, n) in enumerate(zip(offset, local)):
            t = t.narrow(dim, o, n)
        out[coord] = t.clone()
    return out


def make_locals(full, spec):
    """Initial locals for a source spec; Partial values are random splits that sum to the truth."""
    locs = expected_locals(full, spec)
    pdims = [d for d, p in enumerate(spec.placements) if isinstance(p, Partial)]
    if not pdims:
        return locs
    gen = torch.Generator().manual_seed(0)
    topo = spec.mesh
    for block in topo.groups_along(pdims):  # coordinates that differ only along the partial dims
        coords = [topo.coordinate_of(r) for r in block]
        truth = locs[coords[0]]
        noise = [torch.randn(truth.shape, generator=gen) for _ in coords[1:]]
        locs[coords[0]] = truth - sum(noise, torch.zeros(()))
        for c, nz in zip(coords[1:], noise):
            locs[c] = nz
    return locs


def simulate(plan, locs):
    """Apply the plan's steps to the dict of locals."""
    spec = plan.src
    topo = spec.mesh
    placements = spec.placements
    for step in plan.steps:
        d = step.mesh_dim
        new = {}
        for group in topo.groups_along(d):
            coords = [topo.coordinate_of(r) for r in group]
            parts = [locs[c] for c in coords]
            n = len(coords)
            for i, c in enumerate(coords):
                new[c] = _apply(step, parts, i, n)
        locs = new
        placements = placements[:d] + (step.dst,) + placements[d + 1:]
    return locs


def _apply(step, parts, i, n):
    kind = step.collective
    if kind == "all_gather":
        return torch.cat(parts, step.src.dim)
    if kind == "local_chunk":
        return _chunk(parts[i], step.dst.dim, n, i)
    if kind == "all_to_all":
        full = torch.cat([_chunk(p, step.dst.dim, n, i) for p in parts], step.src.dim)
        return full
    if kind == "all_reduce":
        return sum(parts[1:], parts[0].clone())
    if kind == "reduce_scatter":
        return _chunk(sum(parts[1:], parts[0].clone()), step.dst.dim, n, i)
    if kind == "local_partial":
        return parts[i].clone() if i == 0 else torch.zeros_like(parts[i])
    raise AssertionError(kind)


def _chunk(t, dim, n, i):
    sizes = chunk_sizes(t.shape[dim], n)
    return t.narrow(dim, sum(sizes[:i]), sizes[i])


def _placements(ndim):
    return [Replicate(), Partial()] + [Shard(i) for i in range(ndim)]


def _check_pair(topo, shape, src_pl, dst_pl):
    full = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    src = DTensorSpec(topo, src_pl, shape)
    plan = plan_redistribute(src, dst_pl)
    got = simulate(plan, make_locals(full, src))
    dst = DTensorSpec(topo, dst_pl, shape)
    want = expected_locals(full, dst)
    summed = _reduce_partials(got, dst)
    for coord, t in want.items():
        assert summed[coord].shape == t.shape, (src_pl, dst_pl, coord, plan)
        assert torch.allclose(summed[coord], t, atol=1e-4), (src_pl, dst_pl, coord, str(plan))
    for step in plan.steps:
        assert step.collective in {"all_gather", "local_chunk", "all_to_all", "all_reduce", "reduce_scatter",
                                   "local_partial"}
    return plan


def _reduce_partials(locs, spec):
    """Sum Partial dims of the target so values compare with the truth at coordinate 0 of each."""
    topo = spec.mesh
    out = dict(locs)
    for d, p in enumerate(spec.placements):
        if isinstance(p, Partial):
            for group in topo.groups_along(d):
                coords = [topo.coordinate_of(r) for r in group]
                total = sum((out[c] for c in coords[1:]), out[coords[0]].clone())
                for c in coords:
                    out[c] = total
    return out


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 7)])
def test_every_pair_on_1d_mesh(shape):
    topo = MeshTopology((2,))
    for a, b in itertools.product(_placements(2), repeat=2):
        _check_pair(topo, shape, (a,), (b,))


@pytest.mark.parametrize("shape", [(4, 8), (5, 7), (3, 1)])
def test_every_pair_on_2d_mesh(shape):
    topo = MeshTopology((2, 2))
    pls = list(itertools.product(_placements(2), repeat=2))
    for a, b in itertools.product(pls, repeat=2):
        _check_pair(topo, shape, a, b)


@given(mshape=st.sampled_from([(3,), (2, 3), (3, 2), (2, 2, 2)]),
       shape=st.lists(st.integers(0, 7), min_size=1, max_size=3), data=st.data())
@settings(max_examples=150, deadline=None)
def test_random_pairs_any_mesh(mshape, shape, data):
    topo = MeshTopology(mshape)
    pls = _placements(len(shape))
    a = tuple(data.draw(st.sampled_from(pls)) for _ in mshape)
    b = tuple(data.draw(st.sampled_from(pls)) for _ in mshape)
    _check_pair(topo, tuple(shape), a, b)


def test_byte_counts_follow_ring_formulas():
    mib = 1 << 20
    one_d = MeshTopology((2,))
    spec = DTensorSpec(one_d, [Shard(0)], (1024, 1024))  # 4 MiB fp32 global, 2 MiB per shard
    plan = explain_redistribute(spec, [Replicate()])
    assert plan.collectives == ("all_gather",) and plan.total_bytes == 2 * mib
    p = DTensorSpec(one_d, [Partial()], (1024, 1024))
    assert explain_redistribute(p, [Replicate()]).total_bytes == 4 * mib  # 2 (n-1)/n * 4 MiB
    assert explain_redistribute(p, [Shard(1)]).total_bytes == 2 * mib  # (n-1)/n * 4 MiB
    assert explain_redistribute(spec, [Shard(1)]).total_bytes == 1 * mib  # (n-1)/n * 2 MiB
    assert explain_redistribute(DTensorSpec(one_d, [Replicate()], (8, 8)), [Shard(0)]).total_bytes == 0
    four = MeshTopology((4,))
    s4 = DTensorSpec(four, [Shard(0)], (1024, 1024))  # 1 MiB per shard
    assert explain_redistribute(s4, [Replicate()]).total_bytes == 3 * mib


def test_planner_prefers_cheapest_order_and_is_cached():
    topo = MeshTopology((2, 2))
    spec = DTensorSpec(topo, [Partial(), Partial()], (64, 64))
    plan = explain_redistribute(spec, [Shard(0), Shard(1)])
    # reduce-scatter both dims (no all-reduce): two reduce_scatters beat any all_reduce path
    assert plan.collectives == ("reduce_scatter", "reduce_scatter")
    assert explain_redistribute(spec, [Shard(0), Shard(1)]) is plan
    nested = DTensorSpec(topo, [Shard(0), Shard(0)], (8, 8))
    steps = explain_redistribute(nested, [Replicate(), Shard(0)]).steps
    assert steps[0].mesh_dim == 1  # the innermost shard must be gathered first
    text = str(explain_redistribute(DTensorSpec(topo, [Shard(0), Shard(1)], (8, 8)), [Shard(1), Shard(0)]))
    assert "all_to_all" in text or "all_gather" in text
    table = plan_table([plan])
    assert "reduce_scatter + reduce_scatter" in table


def test_planner_bad_target():
    spec = DTensorSpec(MeshTopology((2,)), [Shard(0)], (4, 4))
    with pytest.raises(ValueError, match="target placements: expected 1 placement"):
        plan_redistribute(spec, [Shard(0), Shard(1)])
    with pytest.raises(ValueError, match="out of range"):
        plan_redistribute(spec, [Shard(3)])
