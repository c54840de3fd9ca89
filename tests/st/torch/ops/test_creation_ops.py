# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: creation ops (``*_like``, ``Tensor.new_*``) on 2 ranks against one process."""
import pytest

from hyper_parallel.testing import multi_rank


@pytest.mark.parametrize("shape", [(4, 6), (5, 3)])
@multi_rank(world_size=2, timeout=180)
def test_like_ops_parity_every_placement(shape):
    import torch
    from hyper_parallel import Partial, Replicate
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(0)
    x = torch.randn(shape)
    cases = [("torch.zeros_like", torch.zeros_like), ("torch.ones_like", torch.ones_like),
             ("torch.full_like", lambda a: torch.full_like(a, 2.5)),
             ("torch.ones_like dtype", lambda a: torch.ones_like(a, dtype=torch.float64)),
             ("torch.zeros_like int", lambda a: torch.zeros_like(a, dtype=torch.int32))]
    for name, fn in cases:
        report = check_op(name, fn, [x], grad=False).raise_if_failed()
        assert report.combos == 4 and report.native == 4 and not report.rejected, report  # R, S(0), S(1), P
    # Partial in -> Replicate out (a constant fill is not a partial sum), other placements kept
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    p = hp.DTensor.from_local(torch.ones(shape), mesh, [Partial()])
    for fn in (torch.zeros_like, torch.ones_like, torch.empty_like, lambda a: torch.full_like(a, 3.0)):
        out = fn(p)
        assert out.placements == (Replicate(),) and tuple(out.shape) == shape
    torch.testing.assert_close(torch.ones_like(p).full_tensor(), torch.ones(shape))
    s = hp.distribute_tensor(x, mesh, [hp.Shard(0)])
    e = torch.empty_like(s)
    assert e.placements == (hp.Shard(0),) and tuple(e.shape) == shape and e.to_local().shape == s.to_local().shape


@multi_rank(world_size=2, timeout=120)
def test_new_ops_are_replicate_with_the_given_global_size():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    for placements in ([Shard(0)], [Shard(1)], [Replicate()], [Partial()]):
        x = hp.distribute_tensor(torch.randn(6, 4), mesh, [Replicate()]).redistribute(placements=placements)
        cases = [(x.new_zeros((3, 5)), torch.zeros(3, 5)), (x.new_zeros(3, 5), torch.zeros(3, 5)),
                 (x.new_ones([7]), torch.ones(7)), (x.new_ones(2), torch.ones(2)),
                 (x.new_full((2, 3), 4.5), torch.full((2, 3), 4.5)),
                 (x.new_zeros(size=(1, 2), dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)),
                 (x.new_tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
                 (x.new_ones(()), torch.ones(()))]
        for got, want in cases:
            assert got.placements == (Replicate(),), (placements, got.placements)
            assert tuple(got.shape) == tuple(want.shape) and got.to_local().shape == want.shape  # local = global
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.full_tensor(), want)
        for got in (x.new_empty((4, 3)), x.new_empty_strided((4, 3), (3, 1))):
            assert got.placements == (Replicate(),) and tuple(got.shape) == (4, 3)
            assert got.to_local().shape == (4, 3)
        g = x.new_zeros((2, 2), requires_grad=True)
        assert g.requires_grad and g.is_leaf


@multi_rank(world_size=2, timeout=120)
def test_creation_errors_are_clear():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.core.ops.rule import RuleError
    mesh = hp.init_device_mesh("cpu", (2,))
    x = hp.distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    with pytest.raises(RuleError, match=r"Tensor.new_zeros: size \[2, -1\]: negative dimension"):
        x.new_zeros((2, -1))
    with pytest.raises(RuleError, match="data is ragged"):
        x.new_tensor([[1.0, 2.0], [3.0]])
    with pytest.raises(RuleError, match="data is a tensor"):
        x.new_tensor(torch.ones(2))
