# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: DTensor creation and every placement pair on meshes (2,) and (2, 2), even and uneven shapes,
forward and backward, each compared with the same computation on one process."""
import itertools

import pytest

from hyper_parallel.testing import multi_rank


def _placements(ndim, with_avg=False):
    from hyper_parallel import Partial, Replicate, Shard
    out = [Replicate(), Partial(), Shard(0), Shard(ndim - 1)] if ndim > 1 else [Replicate(), Partial(), Shard(0)]
    return out + [Partial("avg")] if with_avg else out


def _local_of(full, spec, coord):
    """The shard of ``full`` at ``coord`` (Partial dims hold the whole value)."""
    local, offset = spec.local_shape_and_offset(coord)
    t = full
    for dim, (o, n) in enumerate(zip(offset, local)):
        t = t.narrow(dim, o, n)
    return t


def _expected_local_grad(grad, spec, coord):
    """Local gradient convention: shard for Shard, whole for Replicate / Partial(sum), whole / n for
    Partial(avg) (written out here independently of ``grad_placement``)."""
    out = _local_of(grad, spec, coord)
    for d, p in enumerate(spec.placements):
        if p.is_partial() and p.reduce_op == "avg":
            out = out / spec.mesh.shape[d]
    return out


def _check_all_pairs(mesh_shape, shape, src_index):
    import torch
    import hyper_parallel as hp
    from hyper_parallel.core.spec import DTensorSpec
    mesh = hp.init_device_mesh("cpu", mesh_shape)
    coord = mesh.get_coordinate()
    pls = list(itertools.product(_placements(len(shape), len(mesh_shape) == 1), repeat=len(mesh_shape)))
    src = pls[src_index]
    torch.manual_seed(1234)
    full = torch.randn(shape, dtype=torch.float64)
    weight = torch.randn(shape, dtype=torch.float64)
    for dst in pls:
        x = full.clone().requires_grad_(True)
        d = hp.distribute_tensor(x, mesh, src)
        assert d.shape == full.shape and d.placements == tuple(src)
        y = d.redistribute(placements=dst)
        assert y.placements == tuple(dst) and tuple(y.shape) == shape
        # forward: the target shard (Partial dims summed over their groups) equals the truth
        got = y.full_tensor()
        torch.testing.assert_close(got, full, msg=lambda m: f"{src} -> {dst}: {m}")
        want_local = _local_of(full, y.spec, coord)
        if not y.spec.has_partial():
            torch.testing.assert_close(y.to_local(), want_local, msg=lambda m: f"{src} -> {dst} local: {m}")
        # backward: per-rank losses whose total is sum(full * W) (Partial(avg) ranks each carry 1/n)
        w_local = _expected_local_grad(weight, y.spec, coord)
        loss = (y.to_local() * w_local).sum()
        loss.backward()
        assert d.grad is not None, f"{src} -> {dst}: no gradient reached the source"
        spec_src = DTensorSpec(mesh, src, shape)
        torch.testing.assert_close(d.grad.to_local(), _expected_local_grad(weight, spec_src, coord),
                                   msg=lambda m: f"grad {src} -> {dst}: {m}")


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 3)])
@pytest.mark.parametrize("src_index", range(5))
@multi_rank(world_size=2, timeout=120)
def test_every_pair_mesh_2(shape, src_index):
    _check_all_pairs((2,), shape, src_index)


@pytest.mark.parametrize("shape", [(4, 8), (5, 3)])
@pytest.mark.parametrize("src_index", range(16))
@multi_rank(world_size=4, timeout=180)
def test_every_pair_mesh_2x2(shape, src_index):
    _check_all_pairs((2, 2), shape, src_index)
