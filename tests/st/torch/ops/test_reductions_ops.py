# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: reductions and scans on 2 (and a few on 4) ranks, every placement combination, forward and backward."""
import pytest

from hyper_parallel.testing import multi_rank


def _cases():
    """(registry name, callable, grad) for float inputs; every registered reduction name appears."""
    import torch
    t = torch.Tensor
    return [
        ("torch.sum", lambda x: torch.sum(x), True),
        ("torch.sum", lambda x: torch.sum(x, 0), True),
        ("torch.sum", lambda x: torch.sum(x, (0, 1), keepdim=True), True),
        ("Tensor.sum", lambda x: x.sum(dim=-1, keepdim=True), True),
        ("Tensor.sum", lambda x: x.sum(1, dtype=torch.float64), True),
        ("torch.nansum", lambda x: torch.nansum(x, 0), True),
        ("Tensor.nansum", lambda x: x.nansum(), True),
        ("torch.mean", lambda x: torch.mean(x), True),
        ("torch.mean", lambda x: torch.mean(x, 0, True), True),
        ("Tensor.mean", lambda x: x.mean(dim=(0, 1)), True),
        ("Tensor.mean", lambda x: x.mean(-1), True),
        ("torch.count_nonzero", lambda x: torch.count_nonzero(x > 0, 0), False),
        ("Tensor.count_nonzero", lambda x: (x > 0).count_nonzero(), False),
        ("torch.amax", lambda x: torch.amax(x, 0), True),
        ("torch.amax", lambda x: torch.amax(x), True),
        ("Tensor.amax", lambda x: x.amax(dim=(0, 1), keepdim=True), True),
        ("torch.amin", lambda x: torch.amin(x, -1), True),
        ("Tensor.amin", lambda x: x.amin(), True),
        ("torch.max", lambda x: torch.max(x), True),
        ("torch.max", lambda x: torch.max(x, 0), True),
        ("torch.max", lambda x: torch.max(x, 1, keepdim=True), True),
        ("Tensor.max", lambda x: x.max(dim=0).values * 1.0 + x.max(0).indices, True),
        ("Tensor.max", lambda x: x.max(), True),
        ("torch.min", lambda x: torch.min(x, 0, True), True),
        ("torch.min", lambda x: torch.min(x), True),
        ("Tensor.min", lambda x: x.min(-1), True),
        ("torch.argmax", lambda x: torch.argmax(x, 0), False),
        ("torch.argmax", lambda x: torch.argmax(x), False),
        ("Tensor.argmax", lambda x: x.argmax(1, keepdim=True), False),
        ("torch.argmin", lambda x: torch.argmin(x, dim=0, keepdim=True), False),
        ("Tensor.argmin", lambda x: x.argmin(), False),
        ("torch.all", lambda x: torch.all(x > -1.5, 0), False),
        ("torch.all", lambda x: torch.all(x > -1.5), False),
        ("Tensor.all", lambda x: (x > -1.5).all(dim=1, keepdim=True), False),
        ("torch.any", lambda x: torch.any(x > 1.5, 0), False),
        ("Tensor.any", lambda x: (x > 1.5).any(), False),
        ("torch.prod", lambda x: torch.prod(x), True),
        ("torch.prod", lambda x: torch.prod(x, 0), True),
        ("Tensor.prod", lambda x: x.prod(1, keepdim=True), True),
        ("torch.norm", lambda x: torch.norm(x), True),
        ("torch.norm", lambda x: torch.norm(x, 1, 0), True),
        ("Tensor.norm", lambda x: x.norm(p=3, dim=1, keepdim=True), True),
        ("torch.linalg.vector_norm", lambda x: torch.linalg.vector_norm(x), True),
        ("torch.linalg.vector_norm", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=0), True),
        ("torch.linalg.vector_norm", lambda x: torch.linalg.vector_norm(x, 0.5, dim=(0, 1)), True),
        ("torch.linalg.vector_norm", lambda x: torch.linalg.vector_norm(x, 1, 0, dtype=torch.float64), True),
        ("Tensor.norm", lambda x: x.norm(float("inf"), 0, True), True),
        ("torch.norm", lambda x: torch.norm(x, "nuc"), True),
        ("torch.var", lambda x: torch.var(x), True),
        ("torch.var", lambda x: torch.var(x, 0, correction=0), True),
        ("Tensor.var", lambda x: x.var(1, True, True), True),
        ("torch.std", lambda x: torch.std(x, dim=0, unbiased=False), True),
        ("Tensor.std", lambda x: x.std(), True),
        ("Tensor.std", lambda x: x.std((0, 1), correction=2, keepdim=True), True),
        ("torch.logsumexp", lambda x: torch.logsumexp(x, 0), True),
        ("Tensor.logsumexp", lambda x: x.logsumexp((0, 1), keepdim=True), True),
        ("torch.cumsum", lambda x: torch.cumsum(x, 0), True),
        ("torch.cumsum", lambda x: torch.cumsum(x, dim=1, dtype=torch.float64), True),
        ("Tensor.cumsum", lambda x: x.cumsum(-2), True),
        ("torch.mean", lambda x: torch.mean(x, 0, dtype=torch.float64), True),
        ("torch.cumprod", lambda x: torch.cumprod(x, 0), True),
        ("Tensor.cumprod", lambda x: x.cumprod(dim=1), True),
        ("torch.logcumsumexp", lambda x: torch.logcumsumexp(x, 0), True),
        ("Tensor.logcumsumexp", lambda x: x.logcumsumexp(-1), True),
        ("torch.cummax", lambda x: torch.cummax(x, 0), True),
        ("Tensor.cummax", lambda x: x.cummax(1).values, True),
        ("torch.cummin", lambda x: torch.cummin(x, dim=0), True),
        ("Tensor.cummin", lambda x: x.cummin(-1), True),
        ("torch.var_mean", lambda x: torch.var_mean(x, -1), True),
        ("torch.var_mean", lambda x: torch.var_mean(x, correction=0), True),
        ("torch.std_mean", lambda x: torch.std_mean(x, 1, True, True), True),
        ("torch.nanmean", lambda x: torch.nanmean(x, 0), True),
        ("Tensor.nanmean", lambda x: x.nanmean(), True),
    ]


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 3)])
@multi_rank(world_size=2, timeout=600)
def test_reductions_2_ranks(shape):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(3)
    x = torch.randn(shape) + 0.1
    for name, fn, grad in _cases():
        check_op(name, fn, [x], grad=grad).raise_if_failed()
    check_op("torch.max (binary)", torch.max, [x, torch.randn(shape[-1])]).raise_if_failed()
    check_op("Tensor.min (binary)", lambda a, b: a.min(b), [x, torch.randn(shape)]).raise_if_failed()


@multi_rank(world_size=2, timeout=600)
def test_reductions_3d_and_integer_inputs():
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(6)
    x = torch.randn(4, 3, 2)
    for name, fn in [("torch.sum", lambda a: a.sum((0, 2))), ("torch.mean", lambda a: a.mean((0, 2), keepdim=True)),
                     ("torch.amax", lambda a: a.amax((2, 0))), ("torch.max", lambda a: a.max(2)),
                     ("torch.min", lambda a: a.min(0)), ("torch.cumsum", lambda a: a.cumsum(2)),
                     ("torch.var", lambda a: a.var((0, 1))), ("torch.logsumexp", lambda a: a.logsumexp(1))]:
        check_op(name, fn, [x]).raise_if_failed()
    ints = torch.randint(-5, 5, (5, 3))
    for name, fn in [("torch.sum", lambda a: a.sum(0)), ("torch.amax", lambda a: a.amax(0)),
                     ("torch.amin", lambda a: a.amin()), ("torch.max", lambda a: a.max(0)),
                     ("torch.argmin", lambda a: a.argmin(0)), ("torch.cumsum", lambda a: a.cumsum(0)),
                     ("torch.cumsum", lambda a: (a > 0).cumsum(0)), ("torch.any", lambda a: a.any(0)),
                     ("torch.all", lambda a: a.all(0)), ("torch.prod", lambda a: a.prod(0)),
                     ("torch.count_nonzero", lambda a: a.count_nonzero(0))]:
        check_op(name, fn, [ints], grad=False).raise_if_failed()
    check_op("torch.max (int, 1 row)", lambda a: a.max(0), [ints[:1]], grad=False).raise_if_failed()


@multi_rank(world_size=2, timeout=300)
def test_reductions_communication_free_and_partial():
    import torch
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(4)
    x = torch.randn(6, 4)
    s0, s1, r, p = [(Shard(0),)], [(Shard(1),)], [(Replicate(),)], [(Partial(),)]
    # over a non-sharded dim, or a linear reduction over a sharded one: no communication at all
    for name, fn in [("torch.sum", lambda a: a.sum(1)), ("torch.sum", lambda a: a.sum(0)),
                     ("torch.mean", lambda a: a.mean(0)), ("torch.amax", lambda a: a.amax(0)),
                     ("torch.max", lambda a: a.max(1)), ("torch.max", lambda a: a.max(0)),
                     ("torch.var", lambda a: a.var(1)), ("torch.cumsum", lambda a: a.cumsum(0)),
                     ("torch.cumsum", lambda a: a.cumsum(1)), ("torch.all", lambda a: (a > 0).all(0)),
                     ("torch.count_nonzero", lambda a: a.count_nonzero(0))]:
        report = check_op(name, fn, [x], placements=[s0], grad=name != "torch.count_nonzero").raise_if_failed()
        assert report.native == report.combos == 1, (name, report)
    for name, fn in [("torch.sum", lambda a: a.sum()), ("torch.mean", lambda a: a.mean(1)),
                     ("torch.cumsum", lambda a: a.cumsum(0))]:
        report = check_op(name, fn, [x], placements=[p]).raise_if_failed()
        assert report.native == 1, (name, report)
    report = check_op("torch.nanmean", lambda a: a.nanmean(0), [x], placements=[s0 + s1 + r]).raise_if_failed()
    assert report.native == 2, report  # S(1), R native; S(0) gathers
    for name, fn in [("torch.var", lambda a: a.var(0)), ("torch.logsumexp", lambda a: a.logsumexp(0)),
                     ("torch.prod", lambda a: a.prod(0)), ("torch.norm", lambda a: a.norm(dim=0))]:
        report = check_op(name, fn, [x], placements=[s0 + s1 + r]).raise_if_failed()
        assert report.native == 3, report  # S(0): local statistics merged by the expand, no redistribution


@multi_rank(world_size=2, timeout=300)
def test_reductions_outputs_placements():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    x = hp.distribute_tensor(torch.arange(10.0).reshape(5, 2), mesh, [Shard(0)])
    assert x.sum(0).placements == (Partial(),)
    assert x.amax(0).placements == (Partial("max"),)
    assert x.sum(1).placements == (Shard(0),)
    values, indices = x.max(0)
    assert values.placements == indices.placements == (Replicate(),)
    assert indices.to_local().tolist() == [4, 4]
    assert x.cumsum(0).placements == (Shard(0),)


@multi_rank(world_size=2, timeout=300)
def test_partial_max_outputs_moved_to_shards_keep_right_gradients():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Shard
    torch.manual_seed(7)
    mesh = hp.init_device_mesh("cpu", (2,))
    rank = mesh.get_coordinate()[0]
    x, w = torch.randn(6, 4), torch.randn(4)
    # amax over the sharded dim is Partial(max); moving it to Shard is a max reduce-scatter whose adjoint
    # must reach only the winning rank's elements
    for name, reduce in [("amax", "max"), ("amin", "min")]:
        ref = x.clone().requires_grad_()
        (getattr(ref, name)(0) * w).sum().backward()
        leaf = x[3 * rank:3 * rank + 3].clone().requires_grad_()
        out = getattr(hp.DTensor.from_local(leaf, mesh, [Shard(0)]), name)(0)
        assert out.placements == (Partial(reduce),)
        moved = out.redistribute(placements=[Shard(0)])
        (moved.full_tensor() * w).sum().backward()
        torch.testing.assert_close(moved.full_tensor(), getattr(x, name)(0))
        torch.testing.assert_close(leaf.grad, ref.grad[3 * rank:3 * rank + 3])


@multi_rank(world_size=4, timeout=600)
def test_reductions_2d_mesh():
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(5)
    x = torch.randn(5, 3)
    for name, fn in [("torch.sum", lambda a: a.sum(0)), ("torch.mean", lambda a: a.mean()),
                     ("torch.max", lambda a: a.max(0)), ("torch.amin", lambda a: a.amin(1)),
                     ("torch.argmax", lambda a: a.argmax(0)), ("torch.cumsum", lambda a: a.cumsum(0)),
                     ("torch.var", lambda a: a.var(0)), ("torch.all", lambda a: (a > -1).all(0)),
                     ("torch.logsumexp", lambda a: a.logsumexp(0)), ("torch.norm", lambda a: a.norm(dim=0)),
                     ("torch.prod", lambda a: a.prod(0))]:
        check_op(name, fn, [x], mesh_shape=(2, 2), grad=name not in ("torch.argmax", "torch.all")).raise_if_failed()
