# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (3 gloo ranks, one pool run): pipeline stages on meshes of different sizes.

Two pipelines in one run, each 2 stages on 3 ranks, 2 SGD steps of 1F1B (m=2) and GPipe (m=3):

* 1 -> 2: stage 0 on rank 0 (plain module), stage 1 on ranks {1, 2} with TP, receiving its input as
  ``Shard(1)`` (a RowwiseParallel layer consumes it directly): the boundary moves half of the activation
  to each TP rank, and the two halves of the input gradient back.
* 2 -> 1: stage 0 on ranks {0, 1} with TP (ColwiseParallel ending in a ``Shard(1)`` DTensor), stage 1 on
  rank 2 (plain module): the boundary gathers the two halves on rank 2.

Every rank compares the losses, every gradient of its stage (``full_tensor`` for TP parameters) and the
parameters after each optimizer step with the whole model on one process.
"""
from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-5)


def _models():
    import torch
    from torch import nn
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
    second = nn.Sequential(nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 8))
    return first, second


def _run(layout, name, m):
    """``layout``: "1-2" or "2-1"; returns this rank's boundary message counts."""
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel.pipeline as pp
    from hyper_parallel import DTensor, Shard
    from hyper_parallel.core.device_mesh import DeviceMesh
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    me = dist.get_rank()
    meshes = {"1-2": DeviceMesh("cpu", [1, 2], mesh_dim_names=("tp",)),
              "2-1": DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",))}
    mesh = meshes[layout]
    first, second = _models()
    ref = torch.nn.Sequential(copy.deepcopy(first), copy.deepcopy(second))
    if layout == "1-2":
        stage_index = 0 if me == 0 else 1
        if stage_index == 0:
            mod, kw = first, {}
        else:  # input arrives as Shard(1) on ranks {1, 2}: a rowwise layer takes it as it is
            mod = parallelize_module(second, mesh, {"0": RowwiseParallel()})
            kw = {"device_mesh": mesh, "input_placements": [Shard(1)]}
    else:
        stage_index = 0 if me in (0, 1) else 1
        if stage_index == 0:
            mod = parallelize_module(first, mesh, {"0": ColwiseParallel(use_local_output=False)})
            kw = {"device_mesh": mesh}
        else:
            mod, kw = second, {}
    stage = pp.PipelineStage(mod, stage_index, 2, "cpu", **kw)
    sched = pp.get_schedule_class(name)(stage, m, loss_fn=torch.nn.functional.mse_loss)
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(2 * m, 8, generator=g), torch.randn(2 * m, 8, generator=g)
        losses = []
        out = sched.step(x if stage_index == 0 else None, target=y if stage_index == 1 else None, losses=losses)
        ref_out = ref(x)
        ref_loss = torch.nn.functional.mse_loss(ref_out, y)
        ref_loss.backward()
        if stage_index == 1:
            torch.testing.assert_close(sum(losses) / m, ref_loss.detach(), **TOL)
            torch.testing.assert_close(out.full_tensor() if isinstance(out, DTensor) else out, ref_out.detach(),
                                       **TOL)
        for (n, p), q in zip(mod.named_parameters(), ref[stage_index].parameters()):
            grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            torch.testing.assert_close(grad, q.grad, **TOL, msg=lambda t, n=n: f"{layout} {name} stage "
                                       f"{stage_index} {n}: {t}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        for p, q in zip(mod.parameters(), ref[stage_index].parameters()):
            torch.testing.assert_close(p.full_tensor() if isinstance(p, DTensor) else p, q, **TOL)
    plans = {k: (len(b.fwd), len(b.bwd)) for k, b in stage._boundaries.items()}  # pylint: disable=protected-access
    return plans


@multi_rank(world_size=3, timeout=240)
def test_stages_on_meshes_of_one_and_two_ranks_match_one_process():
    import torch.distributed as dist
    me = dist.get_rank()
    for name, m in (("1F1B", 2), ("GPipe", 3)):
        plans = _run("1-2", name, m)
        # 1 -> 2 with Shard(1) on the receiver: one block to each TP rank, one gradient block back from each
        assert plans == {(0, 0): (2, 2)}, (me, plans)
        plans = _run("2-1", name, m)
        # 2 -> 1: the two Shard(1) halves go to rank 2; their gradient halves come back
        assert plans == {(0, 0): (2, 2)}, (me, plans)
