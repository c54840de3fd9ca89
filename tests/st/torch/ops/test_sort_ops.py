# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: sort, argsort, msort, topk, kthvalue, median on 2 (and 4) ranks, forward and backward."""
import pytest

from hyper_parallel.testing import multi_rank


def _cases():
    import torch
    return [
        ("torch.sort", lambda x: torch.sort(x), True),
        ("torch.sort", lambda x: torch.sort(x, 0, descending=True), True),
        ("Tensor.sort", lambda x: x.sort(dim=-1, stable=True), True),
        ("torch.argsort", lambda x: torch.argsort(x, 0), False),
        ("Tensor.argsort", lambda x: x.argsort(descending=True), False),
        ("torch.msort", lambda x: torch.msort(x), True),
        ("Tensor.msort", lambda x: x.msort(), True),
        ("torch.topk", lambda x: torch.topk(x, 1), True),
        ("torch.topk", lambda x: torch.topk(x, 1, dim=0, largest=False), True),
        ("Tensor.topk", lambda x: x.topk(2, -1, True, True), True),
        ("torch.kthvalue", lambda x: torch.kthvalue(x, 1), True),
        ("torch.kthvalue", lambda x: torch.kthvalue(x, 1, 0, True), True),
        ("Tensor.kthvalue", lambda x: x.kthvalue(2, dim=1, keepdim=False), True),
        ("torch.median", lambda x: torch.median(x), True),
        ("torch.median", lambda x: torch.median(x, 0), True),
        ("Tensor.median", lambda x: x.median(dim=-1, keepdim=True), True),
    ]


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 3)])
@multi_rank(world_size=2, timeout=600)
def test_sort_family(shape):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(16)
    x = torch.randn(shape)
    for name, fn, grad in _cases():
        check_op(name, fn, [x], grad=grad).raise_if_failed()


@multi_rank(world_size=2, timeout=300)
def test_sort_keeps_other_shards():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(17)
    x = torch.randn(5, 4)
    for name, fn in [("torch.sort", lambda a: a.sort(-1)), ("torch.topk", lambda a: a.topk(2)),
                     ("torch.kthvalue", lambda a: a.kthvalue(2)), ("torch.argsort", lambda a: a.argsort())]:
        report = check_op(name, fn, [x], placements=[[(Shard(0),)]], grad=name != "torch.argsort").raise_if_failed()
        assert report.native == 1, (name, report)
    mesh = hp.init_device_mesh("cpu", (2,))
    dx = hp.distribute_tensor(x, mesh, [Shard(0)])
    values, indices = dx.kthvalue(2, 1)
    assert values.placements == indices.placements == (Shard(0),)
    assert dx.sort(0).values.placements == (Replicate(),)


@multi_rank(world_size=4, timeout=600)
def test_sort_2d_mesh():
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(18)
    x = torch.randn(5, 3)
    check_op("torch.sort", lambda a: torch.sort(a, 0), [x], mesh_shape=(2, 2)).raise_if_failed()
    check_op("torch.topk", lambda a: torch.topk(a, 2), [x], mesh_shape=(2, 2)).raise_if_failed()
