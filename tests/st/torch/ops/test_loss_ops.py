# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: losses on 2 (and 4) ranks, every placement combination, reductions none/sum/mean, forward and backward."""
import pytest

from hyper_parallel.testing import multi_rank


def _targets(n, c, extra=(), ignore=True):
    import torch
    t = torch.randint(0, c, (n,) + tuple(extra))
    if ignore and t.numel() > 1:
        t.view(-1)[1] = -100  # one ignored target
    return t


@pytest.mark.parametrize("n", [4, 5, 1])
@multi_rank(world_size=2, timeout=600)
def test_class_losses(n):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(12)
    c = 3
    x, t = torch.randn(n, c), _targets(n, c)
    w = torch.rand(c) + 0.5
    probs = torch.softmax(torch.randn(n, c), -1)
    for red in ("none", "sum", "mean"):
        check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b, reduction=red),
                 [x, t]).raise_if_failed()
        check_op("torch.nn.functional.cross_entropy",
                 lambda a, b: F.cross_entropy(a, b, w, reduction=red, label_smoothing=0.2), [x, t]).raise_if_failed()
        check_op("torch.nn.functional.cross_entropy",
                 lambda a, b: F.cross_entropy(a, b, reduction=red, ignore_index=0), [x, t.clamp(min=0)]
                 ).raise_if_failed()
        check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b, reduction=red,
                                                                                   label_smoothing=0.1),
                 [x, probs]).raise_if_failed()
        check_op("torch.nn.functional.nll_loss", lambda a, b: F.nll_loss(F.log_softmax(a, 1), b, reduction=red),
                 [x, t]).raise_if_failed()
        check_op("torch.nn.functional.nll_loss", lambda a, b: F.nll_loss(a, b, w, None, 2, None, red),
                 [x, t.clamp(min=0)]).raise_if_failed()
    # spatial dims: (N, C, d1) with targets (N, d1); the legacy size_average/reduce spelling
    x3, t3 = torch.randn(n, c, 3), _targets(n, c, (3,))
    check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b), [x3, t3],
             max_combos=40).raise_if_failed()
    check_op("torch.nn.functional.nll_loss", lambda a, b: F.nll_loss(a, b, size_average=False), [x3, t3],
             max_combos=40).raise_if_failed()
    check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b), [torch.randn(c), t[0]],
             ).raise_if_failed()


@pytest.mark.parametrize("shape", [(4, 3), (5, 3), (1, 2)])
@multi_rank(world_size=2, timeout=600)
def test_pointwise_losses(shape):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(13)
    x, y = torch.randn(shape), torch.randn(shape)
    wt = torch.rand(shape) + 0.5
    prob = torch.rand(shape) * 0.8 + 0.1
    cw = torch.rand(shape[-1]) + 0.5
    logp = torch.log_softmax(torch.randn(shape), -1)
    for red in ("none", "sum", "mean"):
        check_op("torch.nn.functional.mse_loss", lambda a, b: F.mse_loss(a, b, reduction=red), [x, y]).raise_if_failed()
        check_op("torch.nn.functional.mse_loss", lambda a, b, c: F.mse_loss(a, b, reduction=red, weight=c),
                 [x, y, wt], max_combos=36).raise_if_failed()
        check_op("torch.nn.functional.l1_loss", lambda a, b: F.l1_loss(a, b, reduction=red), [x, y]).raise_if_failed()
        # (no weighted l1_loss: torch 2.13's F.l1_loss drops ``weight`` when it forwards to __torch_function__)
        check_op("torch.nn.functional.smooth_l1_loss", lambda a, b: F.smooth_l1_loss(a, b, reduction=red, beta=0.5),
                 [x, y]).raise_if_failed()
        check_op("torch.nn.functional.huber_loss", lambda a, b, c: F.huber_loss(a, b, red, 0.7, c),
                 [x, y, wt], max_combos=36).raise_if_failed()
        # weight / pos_weight are not differentiable in torch: constants here, DTensors in the forward-only check
        check_op("torch.nn.functional.binary_cross_entropy_with_logits",
                 lambda a, b: F.binary_cross_entropy_with_logits(a, b, wt, reduction=red, pos_weight=cw),
                 [x, prob]).raise_if_failed()
        check_op("torch.nn.functional.binary_cross_entropy_with_logits",
                 lambda a, b, c, d: F.binary_cross_entropy_with_logits(a, b, c, reduction=red, pos_weight=d),
                 [x, prob, wt, cw], grad=False, max_combos=60).raise_if_failed()
        check_op("torch.nn.functional.binary_cross_entropy",
                 lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), b, reduction=red), [x, prob]).raise_if_failed()
        check_op("torch.nn.functional.binary_cross_entropy",
                 lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), b, cw, reduction=red), [x, prob]
                 ).raise_if_failed()
        check_op("torch.nn.functional.kl_div", lambda a, b: F.kl_div(a, b, reduction=red), [logp, prob],
                 ).raise_if_failed()
    check_op("torch.nn.functional.kl_div", lambda a, b: F.kl_div(a, b, reduction="batchmean"), [logp, prob],
             ).raise_if_failed()
    check_op("torch.nn.functional.kl_div", lambda a, b: F.kl_div(a, b, None, None, "batchmean", True),
             [logp, torch.log(prob)]).raise_if_failed()
    check_op("torch.nn.functional.mse_loss", lambda a, b: F.mse_loss(a, b, size_average=False), [x, y]
             ).raise_if_failed()
    check_op("torch.nn.functional.mse_loss (broadcast target)", lambda a, b: F.mse_loss(a, b), [x, y[:1]]
             ).raise_if_failed()


@multi_rank(world_size=2, timeout=300)
def test_loss_placements_and_native():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(14)
    mesh = hp.init_device_mesh("cpu", (2,))
    x, t = torch.randn(6, 5), _targets(6, 5)
    dx = hp.distribute_tensor(x, mesh, [Shard(0)])
    dt = hp.distribute_tensor(t, mesh, [Shard(0)])
    assert F.cross_entropy(dx, dt).placements == (Partial(),)
    assert F.cross_entropy(dx, dt, reduction="none").placements == (Shard(0),)
    dx1 = hp.distribute_tensor(x, mesh, [Shard(1)])  # class-sharded: the class dim is gathered
    assert F.cross_entropy(dx1, hp.distribute_tensor(t, mesh, [Replicate()])).placements == (Replicate(),)
    assert F.cross_entropy(dx1, dt).placements == (Partial(),)  # the target's batch shard is followed
    s0 = [(Shard(0),)]
    for red in ("sum", "mean", "none"):  # batch-sharded input and target: no redistribution
        report = check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b, reduction=red),
                          [x, t], placements=[s0, s0]).raise_if_failed()
        assert report.native == 1, report
        report = check_op("torch.nn.functional.mse_loss", lambda a, b: F.mse_loss(a, b, reduction=red),
                          [x, torch.randn(6, 5)], placements=[s0, s0]).raise_if_failed()
        assert report.native == 1, report


@multi_rank(world_size=4, timeout=600)
def test_losses_2d_mesh():
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(15)
    x, t = torch.randn(5, 3, 2), _targets(5, 3, (2,))
    check_op("torch.nn.functional.cross_entropy", lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1), [x, t],
             mesh_shape=(2, 2), max_combos=60).raise_if_failed()
    check_op("torch.nn.functional.mse_loss", lambda a, b: F.mse_loss(a, b), [x, torch.randn(5, 3, 2)],
             mesh_shape=(2, 2), max_combos=60).raise_if_failed()
