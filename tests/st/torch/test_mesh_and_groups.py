# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: process-group helpers, DeviceMesh (slicing, flattening, groups, coordinates), DTensor
construction round trips and bad-input errors, on real gloo ranks."""
import pytest

from hyper_parallel.testing import multi_rank


@multi_rank(world_size=4, timeout=120)
def test_device_mesh_2d_groups_slicing_flatten():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert mesh.shape == (2, 2) and mesh.ndim == 2 and mesh.size() == 4 and mesh.size("tp") == 2
    assert mesh.get_coordinate() == (rank // 2, rank % 2)
    assert mesh.mesh == [[0, 1], [2, 3]]
    assert hp.get_process_group_ranks(mesh.get_group("tp")) == ((0, 1) if rank < 2 else (2, 3))
    assert hp.get_process_group_ranks(mesh.get_group("dp")) == ((0, 2) if rank % 2 == 0 else (1, 3))
    assert hp.get_group_local_rank(mesh.get_group("tp")) == rank % 2
    assert hp.get_backend() == "gloo"
    tp = mesh["tp"]
    assert tp.shape == (2,) and tp.mesh_dim_names == ("tp",) and tp.get_coordinate() == (rank % 2,)
    assert mesh["tp"] is tp  # cached child, groups reused
    swapped = mesh["tp", "dp"]
    assert swapped.shape == (2, 2) and swapped.get_coordinate() == (rank % 2, rank // 2)
    flat = mesh._flatten("dp_tp")
    assert flat.shape == (4,) and flat.mesh_dim_names == ("dp_tp",)
    # the per-dim group really reduces over the right ranks
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mesh.get_group("tp"))
    assert t.item() == (1.0 if rank < 2 else 5.0)
    with pytest.raises(KeyError, match="no dimension named 'pp'"):
        mesh["pp"]
    with pytest.raises(ValueError, match="holds 6 ranks but the world size is 4"):
        hp.init_device_mesh("cpu", (2, 3))
    mine = hp.split_group(None, [[0, 3], [1, 2]])
    assert hp.get_process_group_ranks(mine) == ((0, 3) if rank in (0, 3) else (1, 2))
    with pytest.raises(ValueError, match="more than one split"):
        hp.split_group(None, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="is not in group"):
        hp.get_group_local_rank(mesh.get_group("tp"), global_rank=3 if rank < 2 else 0)


@multi_rank(world_size=2, timeout=60)
def test_from_local_full_tensor_round_trips_and_uneven():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    full = torch.arange(15.0).reshape(5, 3)
    local = full[:3] if rank == 0 else full[3:]
    d = hp.DTensor.from_local(local, mesh, [Shard(0)], run_check=True)
    assert tuple(d.shape) == (5, 3) and d.size(0) == 5 and d.numel() == 15 and d.stride() == (3, 1)
    assert len(d) == 5 and d.ndim == 2 and d.dtype == torch.float32
    torch.testing.assert_close(d.full_tensor(), full)
    torch.testing.assert_close(d.to_local(), local)
    assert type(d.to_local()) is torch.Tensor
    d2 = hp.DTensor.from_local(local, mesh, [Shard(0)], shape=(5, 3))
    assert d2.spec is d.spec  # interned spec
    p = hp.DTensor.from_local(torch.full((2, 2), float(rank + 1)), mesh, [Partial()])
    torch.testing.assert_close(p.full_tensor(), torch.full((2, 2), 3.0))
    a = hp.DTensor.from_local(torch.full((2, 2), float(rank + 1)), mesh, [Partial("avg")])
    torch.testing.assert_close(a.full_tensor(), torch.full((2, 2), 1.5))
    r = hp.distribute_tensor(full, mesh)  # default: replicate
    assert r.placements == (Replicate(),)
    torch.testing.assert_close(r.to_local(), full)
    # gradient through from_local / to_local is identity on the local shard
    x = local.clone().requires_grad_(True)
    dx = hp.DTensor.from_local(x, mesh, [Shard(0)], shape=(5, 3))
    (dx.full_tensor() * 2).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(local, 2.0))
    text = repr(d)
    assert "placements=[S(0)]" in text and "shape=[5, 3]" in text
    # empty shards: 1 row over 2 ranks
    one = hp.distribute_tensor(torch.ones(1, 4), mesh, [Shard(0)])
    assert one.to_local().shape == ((1, 4) if rank == 0 else (0, 4))
    torch.testing.assert_close(one.full_tensor(), torch.ones(1, 4))
    # distribute_tensor broadcasts from src_data_rank, so ranks agree even from different inputs
    agreed = hp.distribute_tensor(torch.full((2,), float(rank)), mesh, [Replicate()], src_data_rank=1)
    torch.testing.assert_close(agreed.to_local(), torch.full((2,), 1.0))


@multi_rank(world_size=2, timeout=60)
def test_bad_input_errors_name_the_input():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    t = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="expected 1 placement"):
        hp.distribute_tensor(t, mesh, [Shard(0), Shard(1)])
    with pytest.raises(ValueError, match=r"Shard\(dim=2\) is out of range for a 2-D tensor"):
        hp.distribute_tensor(t, mesh, [Shard(2)])
    with pytest.raises(ValueError, match="does not match the shard"):
        hp.DTensor.from_local(torch.zeros(3, 4), mesh, [Shard(0)], shape=(4, 4))
    with pytest.raises(TypeError, match=r"distribute_tensor\(tensor\): expected a torch or mindspore tensor"):
        hp.distribute_tensor([1, 2], mesh, [Replicate()])
    with pytest.raises(ValueError, match="a DeviceMesh is required"):
        hp.DTensor.from_local(t, None, [Replicate()])
    d = hp.distribute_tensor(t, mesh, [Shard(0)])
    with pytest.raises(ValueError, match="target placements are required"):
        d.redistribute(mesh)
    with pytest.raises(ValueError, match="redistribute placements: expected 1 placement"):
        d.redistribute(placements=[Shard(0), Shard(1)])
    with pytest.raises(ValueError, match="src_data_rank=5"):
        hp.distribute_tensor(t, mesh, [Shard(0)], src_data_rank=5)


def test_init_device_mesh_without_process_group_and_bad_shape():
    """No processes: a mesh needs an initialised world; bad shapes are rejected early."""
    import hyper_parallel as hp
    with pytest.raises(ValueError, match="expected positive ints"):
        hp.init_device_mesh("cpu", (2, 0))
    with pytest.raises(ValueError, match="expected one of"):
        hp.get_platform("tensorflow")


@multi_rank(world_size=2, timeout=60)
def test_from_local_partial_avg_gradient_is_the_true_derivative():
    """X = mean_r x_r, L = sum(X * W) => dL/dx_r = W / n on every rank."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial
    mesh = hp.init_device_mesh("cpu", (2,))
    w = torch.arange(4.0).reshape(2, 2)
    x = torch.ones(2, 2, requires_grad=True)
    d = hp.DTensor.from_local(x, mesh, [Partial("avg")])
    (d.full_tensor() * w).sum().backward()
    torch.testing.assert_close(x.grad, w / 2)


@multi_rank(world_size=2, timeout=120)
def test_mesh_from_unsorted_ranks_keeps_mesh_order():
    """DeviceMesh("cpu", [1, 0]): coordinate 0 is rank 1. torch sorts a group's ranks, so every collective
    along the dim must map group order to mesh order: full_tensor, redistribute (all-gather, reduce-scatter,
    all-to-all) and their gradients must follow the mesh, not the sorted group."""
    import torch
    import torch.distributed as dist
    from hyper_parallel import DTensor, Partial, Replicate, Shard
    from hyper_parallel.core.device_mesh import DeviceMesh
    rank = dist.get_rank()
    mesh = DeviceMesh("cpu", [1, 0])
    assert mesh.get_coordinate() == (1 - rank,)
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    coord = 1 - rank
    x = DTensor.from_local(full[2 * coord:2 * coord + 2].clone(), mesh, [Shard(0)])
    torch.testing.assert_close(x.full_tensor(), full)  # all-gather in mesh order
    y = x.redistribute(placements=[Shard(1)])  # all-to-all
    torch.testing.assert_close(y.to_local(), full[:, 3 * coord:3 * coord + 3])
    part = DTensor.from_local(full * (coord + 1) / 3, mesh, [Partial()])  # parts sum to the full tensor
    z = part.redistribute(placements=[Shard(0)])  # reduce-scatter
    torch.testing.assert_close(z.to_local(), full[2 * coord:2 * coord + 2])
    leaf = full[2 * coord:2 * coord + 2].clone().requires_grad_()
    weight = torch.arange(24, dtype=torch.float32).reshape(4, 6) + 1
    g = DTensor.from_local(leaf, mesh, [Shard(0)]).redistribute(placements=[Replicate()])
    (g.to_local() * weight).sum().backward()  # the adjoint of the all-gather: this rank's rows of weight
    torch.testing.assert_close(leaf.grad, weight[2 * coord:2 * coord + 2])
