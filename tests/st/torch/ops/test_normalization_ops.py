# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: softmax, log_softmax, layer/rms/group/batch norm on 2 (and 4) ranks, forward and backward."""
import pytest

from hyper_parallel.testing import multi_rank


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 3)])
@multi_rank(world_size=2, timeout=600)
def test_softmax_family(shape):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(6)
    x = torch.randn(shape)
    for name, fn in [("torch.softmax", lambda a: torch.softmax(a, 1)),
                     ("torch.softmax", lambda a: torch.softmax(a, dim=0, dtype=torch.float64)),
                     ("Tensor.softmax", lambda a: a.softmax(-1)),
                     ("torch.nn.functional.softmax", lambda a: F.softmax(a, dim=0)),
                     ("torch.nn.functional.softmax", lambda a: F.softmax(a, -1)),
                     ("torch.log_softmax", lambda a: torch.log_softmax(a, 0)),
                     ("Tensor.log_softmax", lambda a: a.log_softmax(dim=1)),
                     ("torch.nn.functional.log_softmax", lambda a: F.log_softmax(a, dim=-1))]:
        check_op(name, fn, [x]).raise_if_failed()


@multi_rank(world_size=2, timeout=300)
def test_softmax_legacy_dim_and_native():
    import warnings
    import torch
    import torch.nn.functional as F
    from hyper_parallel import Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(7)
    x3 = torch.randn(3, 4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the implicit-dim deprecation warning
        check_op("torch.nn.functional.softmax", lambda a: F.softmax(a), [x3]).raise_if_failed()
        check_op("torch.nn.functional.log_softmax", lambda a: F.log_softmax(a), [torch.randn(4, 5)]).raise_if_failed()
    report = check_op("torch.softmax", lambda a: torch.softmax(a, -1), [x3],
                      placements=[[(Shard(0),), (Shard(1),)]]).raise_if_failed()
    assert report.native == 2, report


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 2, 4)])
@multi_rank(world_size=2, timeout=600)
def test_layer_and_rms_norm(shape):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(8)
    x = torch.randn(shape)
    n = shape[-1]
    w, b = torch.rand(n) + 0.5, torch.randn(n)
    check_op("torch.nn.functional.layer_norm", lambda a, c, d: F.layer_norm(a, (n,), c, d), [x, w, b]).raise_if_failed()
    check_op("torch.nn.functional.layer_norm", lambda a: F.layer_norm(a, list(shape[-2:])), [x]).raise_if_failed()
    check_op("torch.layer_norm", lambda a, c, d: torch.layer_norm(a, [n], c, d, 1e-6), [x, w, b]).raise_if_failed()
    check_op("torch.nn.functional.rms_norm", lambda a, c: F.rms_norm(a, (n,), c, eps=1e-6), [x, w]).raise_if_failed()
    check_op("torch.nn.functional.rms_norm", lambda a: F.rms_norm(a, list(shape[-2:])), [x]).raise_if_failed()
    check_op("torch.rms_norm", lambda a, c: torch.rms_norm(a, [n], c), [x, w]).raise_if_failed()


@multi_rank(world_size=2, timeout=600)
def test_group_and_batch_norm_eval():
    import torch
    import torch.nn.functional as F
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(9)
    for shape in [(4, 6, 3), (3, 4, 5)]:
        x = torch.randn(shape)
        c = shape[1]
        w, b = torch.rand(c) + 0.5, torch.randn(c)
        check_op("torch.nn.functional.group_norm", lambda a, p, q: F.group_norm(a, 2, p, q), [x, w, b],
                 max_combos=48).raise_if_failed()
        check_op("torch.group_norm", lambda a: torch.group_norm(a, 2), [x]).raise_if_failed()
        rm, rv = torch.randn(c), torch.rand(c) + 0.5
        check_op("torch.nn.functional.batch_norm", lambda a, p, q: F.batch_norm(a, rm, rv, p, q), [x, w, b],
                 max_combos=48).raise_if_failed()
        check_op("torch.batch_norm", lambda a, p, q: torch.batch_norm(a, p, q, rm, rv, False, 0.1, 1e-5, False),
                 [x, w, b], max_combos=48).raise_if_failed()
        # channel-sharded input with channel-sharded statistics: no communication at all
        report = check_op("torch.nn.functional.batch_norm", lambda a, m, v: F.batch_norm(a, m, v), [x, rm, rv],
                          grad=False, placements=[[(Shard(1),)], [(Shard(0),)], [(Shard(0),)]]).raise_if_failed()
        assert report.native == 1, report
        report = check_op("torch.nn.functional.batch_norm", lambda a: F.batch_norm(a, rm, rv), [x],
                          placements=[[(Shard(0),), (Shard(2),), (Replicate(),)]]).raise_if_failed()
        assert report.native == 3, report


@multi_rank(world_size=2, timeout=300)
def test_batch_norm_training_updates_running_stats():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.core.ops.rule import RuleError
    torch.manual_seed(10)
    mesh = hp.init_device_mesh("cpu", (2,))
    x = torch.randn(5, 4, 3)
    w, b = torch.rand(4) + 0.5, torch.randn(4)
    ref_m, ref_v = torch.zeros(4), torch.ones(4)
    ref = F.batch_norm(x, ref_m, ref_v, w, b, training=True)
    # batch-sharded input, plain (replicated) running stats: gathered batch statistics, identical updates
    m, v = torch.zeros(4), torch.ones(4)
    out = F.batch_norm(hp.distribute_tensor(x, mesh, [Shard(0)]), m, v, w, b, training=True)
    torch.testing.assert_close(out.full_tensor(), ref)
    torch.testing.assert_close((m, v), (ref_m, ref_v))
    # channel-sharded input and running stats: each rank updates its own channels in place
    dm = hp.distribute_tensor(torch.zeros(4), mesh, [Shard(0)])
    dv = hp.distribute_tensor(torch.ones(4), mesh, [Shard(0)])
    dw = hp.distribute_tensor(w, mesh, [Replicate()])
    out = F.batch_norm(hp.distribute_tensor(x, mesh, [Shard(1)]), dm, dv, dw, b, training=True)
    assert out.placements == (Shard(1),)
    torch.testing.assert_close(out.full_tensor(), ref)
    torch.testing.assert_close((dm.full_tensor(), dv.full_tensor()), (ref_m, ref_v))
    # a running statistic that would have to be redistributed cannot be updated in place: refused
    with pytest.raises(RuleError, match=r"training mode updates running_mean in place, but it is \['R'\]"):
        F.batch_norm(hp.distribute_tensor(x, mesh, [Shard(1)]), torch.zeros(4), torch.ones(4), training=True)


@multi_rank(world_size=4, timeout=600)
def test_normalization_2d_mesh():
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(11)
    x = torch.randn(5, 3)
    w = torch.rand(3) + 0.5
    check_op("torch.softmax", lambda a: torch.softmax(a, -1), [x], mesh_shape=(2, 2)).raise_if_failed()
    check_op("torch.nn.functional.layer_norm", lambda a, c: F.layer_norm(a, (3,), c), [x, w], mesh_shape=(2, 2),
             max_combos=64).raise_if_failed()
