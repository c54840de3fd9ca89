# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: cross-mesh redistribute on 2 gloo ranks (meshes with different rank sets), forward and adjoint.

Each case moves a DTensor from a source mesh to a destination mesh, checks every destination shard
against its slice of the full tensor, then backpropagates a known weight through the shards and
checks the source gradient (every case starts from a replicated leaf, so it must equal the weight)."""
import pytest

from hyper_parallel.testing import multi_rank

CASES = [
    # (source ranks, source placements, destination ranks, destination placements)
    ((0,), "R", (0, 1), "S0"),
    ((1,), "R", (0, 1), "S1"),
    ((0, 1), "S0", (1,), "R"),
    ((0, 1), "S1", (1, 0), "S0"),
    ((0, 1), "P", (0,), "R"),
    ((0, 1), "R", (1, 0), "S1"),
]


def _pl(code):
    from hyper_parallel import Partial, Replicate, Shard
    return {"R": Replicate(), "S0": Shard(0), "S1": Shard(1), "P": Partial()}[code]


@multi_rank(world_size=2, timeout=240)
def test_cross_mesh_redistribute_and_adjoint():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import DTensor
    from hyper_parallel.core.device_mesh import DeviceMesh
    from hyper_parallel.core.spec import DTensorSpec
    me = dist.get_rank()
    meshes = {r: DeviceMesh("cpu", list(r)) for r in {c[0] for c in CASES} | {c[2] for c in CASES}}
    full = torch.arange(30, dtype=torch.float32).reshape(5, 6) / 7
    weight = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    for src_ranks, src_pl, dst_ranks, dst_pl in CASES:
        src_mesh, dst_mesh = meshes[src_ranks], meshes[dst_ranks]
        what = f"{src_pl}@{src_ranks} -> {dst_pl}@{dst_ranks}"
        x, factor = None, 1.0
        if me in src_ranks:
            leaf = full.clone().requires_grad_()
            base = DTensor.from_local(leaf, src_mesh, [_pl("R")])
            if src_pl == "P":  # two parts that sum to the tensor; each part's gradient is the full one
                factor = 0.25 if src_mesh.get_local_rank() == 0 else 0.75
                local = leaf * factor
                x = DTensor.from_local(local, src_mesh, [_pl("P")], shape=full.shape)
            else:
                x = base.redistribute(placements=[_pl(src_pl)])
            y = x.redistribute(device_mesh=dst_mesh, placements=[_pl(dst_pl)])
        else:
            spec = DTensorSpec(src_mesh, [_pl(src_pl)], full.shape)
            y = hp.redistribute_across_meshes(None, dst_mesh, [_pl(dst_pl)], src_spec=spec, dtype=full.dtype)
        if me in dst_ranks:  # compare the local shard (a reversed rank order is a different mesh, not a gather)
            shape, off = y.spec.local_shape_and_offset(dst_mesh.get_coordinate())
            region = tuple(slice(o, o + n) for o, n in zip(off, shape))
            torch.testing.assert_close(y.to_local(), full[region], msg=lambda t, w=what: f"{w}: {t}")
            (y.to_local() * weight[region]).sum().backward()
        else:
            y.sum().backward()  # the placeholder: reaches this rank's half of the adjoint
        if me in src_ranks:
            torch.testing.assert_close(leaf.grad, weight * factor, msg=lambda t, w=what: f"{w} gradient: {t}")


def test_explain_cross_mesh_plans_by_bytes():
    from hyper_parallel import Partial, Replicate, Shard, explain_redistribute
    from hyper_parallel.core.mesh_topology import MeshTopology
    from hyper_parallel.core.spec import DTensorSpec
    one, two = MeshTopology((1,), (0,)), MeshTopology((2,), (1, 2))
    plan = explain_redistribute(DTensorSpec(one, [Replicate()], (4, 6)), [Shard(0)], device_mesh=two)
    assert plan.collectives == ("cross_mesh_copy",) and plan.copy_bytes == 96
    assert "rank pairs [(0, 1), (0, 2)]" in str(plan)
    partial = explain_redistribute(DTensorSpec(two, [Partial()], (4, 6)), [Replicate()], device_mesh=one)
    assert partial.collectives == ("reduce_scatter", "cross_mesh_copy")  # cheaper than all_reduce first
    assert partial.total_bytes == 48 + 96
    same = explain_redistribute(DTensorSpec(MeshTopology((2,), (0, 1)), [Replicate()], (4, 6)), [Shard(1)],
                                device_mesh=MeshTopology((2,), (1, 0)))
    assert same.collectives == () and same.total_bytes == 0
    with pytest.raises(ValueError, match="Partial"):
        explain_redistribute(DTensorSpec(one, [Replicate()], (4, 6)), [Partial()], device_mesh=two)
