# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (2 gloo ranks): DTensor factories ``hyper_parallel.zeros/ones/empty/full/rand/randn``.

The same calls run against ``torch.distributed.tensor`` (only the import differs): local shapes (uneven
and empty shards included), placements, dtypes and full tensors of the deterministic factories equal
torch's; ``rand``/``randn`` give the same full tensor on every placement for one seed, equal to the
one-process reference of the placement-invariant RNG.
"""
import pytest

from hyper_parallel.testing import multi_rank


def _calls(lib, mesh, shard):
    import torch
    return {
        "zeros ints": lib.zeros(5, 3, device_mesh=mesh, placements=[shard(0)]),
        "zeros tuple, dim 1": lib.zeros((5, 3), device_mesh=mesh, placements=[shard(1)]),
        "ones Size, float64": lib.ones(torch.Size([7]), dtype=torch.float64, device_mesh=mesh, placements=[shard(0)]),
        "ones default Replicate": lib.ones([2, 2], device_mesh=mesh),
        "empty rank past the end": lib.empty(1, 4, device_mesh=mesh, placements=[shard(0)]),
        "full int": lib.full((3, 5), 7, dtype=torch.int64, device_mesh=mesh, placements=[shard(1)]),
        "zeros requires_grad": lib.zeros(4, requires_grad=True, device_mesh=mesh, placements=[shard(0)]),
    }


@multi_rank(world_size=2, timeout=120)
def test_factories_follow_torch_and_allocate_local_shards():
    import torch
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh as torch_mesh
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.platform.torch.random import reference_values
    mesh = hp.init_device_mesh("cpu", (2,))
    ours, theirs = _calls(hp, mesh, Shard), _calls(tdt, torch_mesh("cpu", (2,)), tdt.Shard)
    for what, a in ours.items():
        b = theirs[what]
        assert isinstance(a, hp.DTensor), what
        assert tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype, what
        assert tuple(a.to_local().shape) == tuple(b.to_local().shape), what  # only the local shard exists
        assert a.requires_grad == b.requires_grad and a.is_leaf, what
        assert [(p.is_shard(), getattr(p, "dim", None)) for p in a.placements] == \
            [(p.is_shard(), getattr(p, "dim", None)) for p in b.placements], what
        if not what.startswith("empty"):
            assert torch.equal(a.full_tensor().detach(), b.full_tensor().detach()), what
    assert ours["empty rank past the end"].to_local().numel() == (4, 0)[mesh.get_coordinate()[0]]
    # random factories: one seed, the same full tensor on every placement, equal to the one-process reference
    fulls = []
    for placements in ([Shard(0)], [Shard(1)], [Replicate()]):
        hp.manual_seed(3)
        r = hp.randn(5, 3, device_mesh=mesh, placements=placements, dtype=torch.float64)
        assert tuple(r.to_local().shape) == {0: ((3, 3), (2, 3)), 1: ((5, 2), (5, 1))}.get(
            placements[0].dim if placements[0].is_shard() else -1, ((5, 3),) * 2)[mesh.get_coordinate()[0]]
        fulls.append(r.full_tensor())
        hp.manual_seed(3)
        u = hp.rand((5, 3), device_mesh=mesh, placements=placements)
        assert torch.equal(u.full_tensor(), reference_values("uniform", (5, 3), (3, 0)))
    assert all(torch.equal(f, fulls[0]) for f in fulls)
    assert torch.equal(fulls[0], reference_values("normal", (5, 3), (3, 0), torch.float64))
    assert 0 < fulls[0].std() < 3  # really normal draws, not a constant
    with pytest.raises(TypeError, match="pass it as device_mesh="):
        hp.rand((9, 4), mesh, [Shard(0)])  # torch's signature: the mesh is keyword-only
    with pytest.raises(ValueError, match="not Partial"):
        hp.randn(4, device_mesh=mesh, placements=[Partial()])
    with pytest.raises(ValueError, match="only torch.strided"):
        hp.zeros(4, layout=torch.sparse_coo, device_mesh=mesh)
    with pytest.raises(ValueError, match="out of range for a 1-D tensor"):
        hp.ones(4, device_mesh=mesh, placements=[Shard(1)])
    z = hp.zeros(4, device_mesh=mesh, placements=[Partial()])  # a pending sum of zeros, as torch
    assert z.placements == (Partial(),) and torch.equal(z.full_tensor(), torch.zeros(4))
