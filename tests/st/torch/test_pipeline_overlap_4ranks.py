# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (4 gloo ranks): PP x EP with ``overlap_b_f`` — expert-parallel all-to-alls on two compute threads.

A (pp=2, ep=2) mesh; 4 stages of ``x + MoE(tanh(lin(x)))`` blocks (4 experts top-2 plus a shared expert),
the experts of every stage split over its ep pair (``ExpertParallel``, dropless all-to-all, async
dispatch), each ep rank feeding its half of the batch. Interleaved1F1B and DualPipeV with
``overlap_b_f=True`` run a microbatch's forward (its dispatch/combine all-to-alls on the ep group) on the
calling thread while another's backward (the inverse all-to-alls) runs on the backward thread, on the ep
group's twin (``platform/torch/lanes.py``). 2 SGD steps; losses, every gradient (replicated ones summed
over ep, expert ones gathered) and the parameters equal one process on the whole batch, with the loss
the sum of the two halves' losses. A ``torch.profiler`` trace of one more step shows the backward
thread's all-to-alls intersecting the calling thread's forwards (summed over the ranks).
"""
from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-5)


def _grad_of(p, group):
    """The whole gradient of ``p``: a sharded (expert) one gathered; a replicated one summed over ``group``
    in place (the data-parallel gradient sync over the ep ranks, which feed different halves of the batch)."""
    import torch.distributed as dist
    from hyper_parallel import DTensor
    if isinstance(p, DTensor) and any(pl.is_shard() for pl in p.placements):
        g = p.grad
        return g.full_tensor() if isinstance(g, DTensor) else \
            DTensor.from_local(g, p.device_mesh, p.placements, shape=p.shape).full_tensor()
    local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
    dist.all_reduce(local, group=group)
    return local


def _pp_ep(name, m, trace_dir=None):
    import copy
    import os
    import torch
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile
    from hyper_parallel.moe import ExpertParallel
    from tests.st.torch.test_pipeline_overlap import make_moe_blocks
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "ep"))
    pp_rank, ep_rank = mesh.get_local_rank("pp"), mesh.get_local_rank("ep")
    ep_group = mesh["ep"].get_group()
    blocks = make_moe_blocks(4, d=16)
    ref = copy.deepcopy(blocks)
    placement = pp.generate_schedule(name, 2, m, 2).stage_to_rank
    mine = [s for s in range(4) if placement[s] == pp_rank]
    for s in mine:
        hp.parallelize_module(blocks[s].moe, mesh["ep"], {"experts": ExpertParallel()})
    stages = [pp.PipelineStage(blocks[s], s, 4, "cpu", group=mesh["pp"].get_group()) for s in mine]
    sched = pp.get_schedule_class(name)(stages, m, loss_fn=torch.nn.functional.mse_loss, overlap_b_f=True)
    opt = torch.optim.SGD([p for s in mine for p in blocks[s].parameters()], lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    first, last = 0 in mine, 3 in mine
    for step in range(2):
        _train_step(sched, (blocks, ref, mine), (opt, ref_opt), (first, last, ep_rank, ep_group), m, step, name)
    if trace_dir is None:
        return None
    x = torch.randn(4 * m, 16)
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        for _ in range(2):
            sched.step(x[:2 * m] if first else None, target=x[:2 * m] if last else None)
    path = os.path.join(trace_dir, f"pp_ep_{name}_{torch.distributed.get_rank()}.json")
    prof.export_chrome_trace(path)
    return path


def _train_step(sched, models, opts, where, m, step, name):
    """One pipeline step and one reference step; losses, gradients, then both optimizers."""
    import torch
    blocks, ref, mine = models
    first, last, ep_rank, ep_group = where
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(4 * m, 16, generator=g), torch.randn(4 * m, 16, generator=g)
    half = slice(2 * m * ep_rank, 2 * m * (ep_rank + 1))
    losses = []
    sched.step(x[half] if first else None, target=y[half] if last else None, losses=losses)
    ref_loss = sum(torch.nn.functional.mse_loss(ref_forward(ref, x[h]), y[h])
                   for h in (slice(0, 2 * m), slice(2 * m, 4 * m)))
    ref_loss.backward()
    if last:
        mine_loss = torch.stack(losses).mean().reshape(1)
        torch.distributed.all_reduce(mine_loss, group=ep_group)
        torch.testing.assert_close(mine_loss[0], ref_loss.detach(), **TOL)
    for s in mine:
        for (pname, p), q in zip(blocks[s].named_parameters(), ref[s].parameters()):
            torch.testing.assert_close(_grad_of(p, ep_group), q.grad, **TOL,
                                       msg=lambda t, s=s, n=pname: f"{name} stage {s} {n}: {t}")
    for o in opts:
        o.step()
        o.zero_grad()


def ref_forward(blocks, x):
    """The whole model on one process."""
    for b in blocks:
        x = b(x)
    return x


@multi_rank(world_size=4, timeout=400)
def test_pp_x_ep_overlap_b_f_matches_one_process():
    import tempfile
    import torch
    import torch.distributed as dist
    from hyper_parallel.devtools.trace_overlap import trace_overlap
    _pp_ep("DualPipeV", 4)
    with tempfile.TemporaryDirectory() as tmp:
        path = _pp_ep("Interleaved1F1B", 4, trace_dir=tmp)
        a2a_during_forward = trace_overlap(path, r"hp\.comm\.all_to_all_single", r"hp\.pp\.compute\.\d+F")
    print(f"rank {dist.get_rank()}: EP all-to-all (any thread) during another thread's forward: {a2a_during_forward}")
    total = torch.tensor([a2a_during_forward.both_us])
    dist.all_reduce(total)
    assert total.item() > 0, str(a2a_during_forward)
