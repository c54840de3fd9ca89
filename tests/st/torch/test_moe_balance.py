# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: the MoE router losses (auxiliary loss, batch- and sequence-level, and the z-loss) on global statistics, on
2 gloo ranks against one process on the whole batch.

Two ways the tokens of one loss are spread: data parallel (rows split, gradients averaged over the ranks:
``set_token_groups(world, None, data_parallel_size=2)``) and sequence parallel (each sequence split, gradients
summed over the ranks as under TP: ``set_token_groups(world, world, 1)``). In both the averaged / summed router
gradient equals the one-process gradient of the same losses on the whole batch.
"""
import copy

import pytest

from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-6)


def _moe(level):
    import torch
    from hyper_parallel.moe import MoE, MoEConfig
    torch.manual_seed(0)
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=16, num_shared_experts=1,
                        load_balance="expert_bias+aux_loss", aux_loss_coeff=0.5, aux_loss_level=level,
                        z_loss_coeff=0.1))
    moe.router.reset_parameters(std=0.5)
    return moe


@pytest.mark.parametrize("split", ["data", "sequence"])
@multi_rank(world_size=2, timeout=120)
def test_router_losses_on_global_statistics_match_one_process(split):
    import torch
    import torch.distributed as dist
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 6, 8, generator=g), torch.randn(4, 6, 8, generator=g)
    dim = 0 if split == "data" else 1
    for level in ("batch", "sequence"):
        ref = _moe(level)
        model = copy.deepcopy(ref)
        world = dist.group.WORLD
        if split == "data":
            model.set_token_groups(world, None, data_parallel_size=2)
        else:
            model.set_token_groups(world, world, data_parallel_size=1)
        out = model(x.chunk(2, dim)[rank])
        (out * w.chunk(2, dim)[rank]).sum().backward()
        ref_out = ref(x)
        # data parallel: the global loss is the mean of the ranks' losses; sequence split: their sum
        ((ref_out * w).sum() * (0.5 if split == "data" else 1.0)).backward()
        torch.testing.assert_close(out, ref_out.chunk(2, dim)[rank], **TOL)
        for (name, p), (_, rp) in zip(model.named_parameters(), ref.named_parameters()):
            grad = p.grad.clone()
            dist.all_reduce(grad)
            if split == "data":
                grad /= 2
            torch.testing.assert_close(grad, rp.grad, **TOL, msg=lambda m, n=name, lv=level: f"{lv} {n}: {m}")
        aux = model.aux_loss.clone()  # this rank's share (times the data-parallel factor)
        dist.all_reduce(aux)
        torch.testing.assert_close(aux / (2 if split == "data" else 1), ref.aux_loss, **TOL)


@multi_rank(world_size=2, timeout=120)
def test_router_losses_without_global_statistics_differ():
    """The control: the same data-parallel split with each rank's own statistics (no token group) gives a
    different router gradient, so the test above can fail."""
    import torch
    import torch.distributed as dist
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 6, 8, generator=g), torch.randn(4, 6, 8, generator=g)
    ref = _moe("batch")
    model = copy.deepcopy(ref)
    model.set_token_groups(None, None, data_parallel_size=2)
    (model(x.chunk(2)[rank]) * w.chunk(2)[rank]).sum().backward()
    ((ref(x) * w).sum() * 0.5).backward()
    grad = model.router.gate.weight.grad.clone()
    dist.all_reduce(grad)
    assert not torch.allclose(grad / 2, ref.router.gate.weight.grad, rtol=1e-5, atol=1e-6)


@multi_rank(world_size=2, timeout=120)
def test_sinkhorn_balanced_selection_on_two_ranks_equals_one_process():
    """Sinkhorn routing with the count-balanced top-k: the column sums and the per-round expert counts are summed
    over the ranks, so 2 ranks holding half the tokens each select exactly the experts one process selects on the
    whole batch, and the global loads are within the tolerance of the mean (near-identical tokens, where plain
    top-k sends every token to the same 2 experts)."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.moe.api import BALANCE_TOL
    from hyper_parallel.moe._torch.router import balance_top_k, sinkhorn_balance
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(11)
    logits = torch.tensor([2.0, 1.5, 0.0, -0.5, 0.3, -1.0, 0.8, 0.1]) + 1e-3 * torch.randn(512, 8, generator=g)
    ref = balance_top_k(sinkhorn_balance(logits), 2).topk(2, dim=-1).indices
    mine = balance_top_k(sinkhorn_balance(logits.chunk(2)[rank], dist.group.WORLD), 2,
                         dist.group.WORLD).topk(2, dim=-1).indices
    assert torch.equal(mine, ref.chunk(2)[rank])
    loads = torch.bincount(ref.reshape(-1), minlength=8).double()
    assert loads.max() <= loads.mean() * (1 + BALANCE_TOL) and loads.min() >= loads.mean() * (1 - BALANCE_TOL)


@multi_rank(world_size=2, timeout=120)
def test_collective_counter_counts_each_call_once():
    """``CollectiveCounter`` (the trainer's per-step ``collectives`` metric): two all-reduces, a platform all-gather
    (called through a module-level helper of ``platform/torch/collectives.py``) and one batched send/recv pair,
    which counts once although it runs an isend and an irecv; nothing is counted after the block."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.platform import get_platform
    from hyper_parallel.platform.torch.collective_count import CollectiveCounter
    rank, other = dist.get_rank(), 1 - dist.get_rank()
    with CollectiveCounter() as counter:
        t = torch.ones(3)
        dist.all_reduce(t)
        dist.all_reduce(t)
        get_platform("torch").all_gather(torch.ones(2, 3), dist.group.WORLD, 0, [2, 2], rank)
        got = torch.zeros(3)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, other), dist.P2POp(dist.irecv, got, other)]):
            work.wait()
    gather = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
    assert dict(counter.by_op) == {"all_reduce": 2, gather: 1, "batch_isend_irecv": 1}, counter.by_op
    assert counter.total == 4 and torch.equal(got, torch.full((3,), 4.0))
    dist.all_reduce(t)
    assert counter.total == 4
