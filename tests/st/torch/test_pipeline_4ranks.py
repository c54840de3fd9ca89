# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (4 gloo ranks, one pool run each): pipelining composed with FSDP and with TP.

* PP x FSDP on a (pp=2, dp=2) mesh: every stage ``fully_shard`` over its dp pair with
  ``reshard_after_forward=False``; the runtime gathers each stage once per step (UNSHARD), lets the
  microbatch backwards accumulate unreduced (``set_requires_gradient_sync(False)``,
  ``set_is_last_backward(False)``) and reduce-scatters once at REDUCE_GRAD. 1F1B (full backward) and
  ZB-H1 (I/W split) train 2 SGD steps; gathered gradients and parameters equal one process.
* PP x FSDP x TP on a 3-D (pp=2, dp, tp) mesh with dp * tp = 2 (both factorisations): the stage is TP over
  the 2-D sub-mesh's tp slice, then fully_shard over its dp slice.
* PP x TP on a (pp=2, tp=2) mesh: stage 0 ends in a Replicate DTensor, which crosses the stage
  boundary as its local tensor plus its spec (sent once) and is rebuilt on stage 1's own TP mesh.
"""
from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-5)


def _pp_fsdp(name, m):
    import copy
    import torch
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    from tests.st.torch.test_pipeline import make_blocks, reference_forward
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    pp_rank, dp_rank = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
    blocks = make_blocks(2)
    ref = copy.deepcopy(blocks)
    hp.fully_shard(blocks[pp_rank], mesh=mesh["dp"], reshard_after_forward=False)
    stage = pp.PipelineStage(blocks[pp_rank], pp_rank, 2, "cpu", group=mesh["pp"].get_group())
    sched = pp.get_schedule_class(name)([stage] if name != "1F1B" else stage, m,
                                        loss_fn=torch.nn.functional.mse_loss, stages_per_rank=1)
    opt = torch.optim.SGD(blocks[pp_rank].parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
        rows = slice(4 * dp_rank, 4 * dp_rank + 4)
        sched.step(x[rows] if pp_rank == 0 else None, target=y[rows] if pp_rank == 1 else None)
        torch.nn.functional.mse_loss(reference_forward(ref, x), y).backward()
        for (n, p), q in zip(blocks[pp_rank].named_parameters(), ref[pp_rank].parameters()):
            if q.grad is not None:
                torch.testing.assert_close(p.grad.full_tensor(), q.grad, **TOL, msg=lambda t, n=n: f"{name} {n}: {t}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        for p, q in zip(blocks[pp_rank].parameters(), ref[pp_rank].parameters()):
            torch.testing.assert_close(p.full_tensor(), q, **TOL)
    return [str(a) for a in sched.pipeline_order_with_comms[pp_rank] if "SHARD" in str(a)]


@multi_rank(world_size=4, timeout=300)
def test_pp_x_fsdp_matches_one_process():
    steps = _pp_fsdp("1F1B", 2)
    assert steps[0].endswith("UNSHARD") and steps[-1].endswith("RESHARD") and len(steps) == 2
    _pp_fsdp("InterleavedZeroBubble", 2)


@multi_rank(world_size=4, timeout=300)
def test_pp_x_tp_dtensor_activation_matches_one_process():
    import copy
    import torch
    from torch import nn
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    from hyper_parallel import DTensor
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    pp_rank = mesh.get_local_rank("pp")
    torch.manual_seed(0)
    parts = [nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8)) for _ in range(2)]
    ref = copy.deepcopy(parts)
    mine = parallelize_module(parts[pp_rank], mesh["tp"], {
        "0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=pp_rank == 1)})
    stage = pp.PipelineStage(mine, pp_rank, 2, "cpu", group=mesh["pp"].get_group())
    seen = []
    mine.register_forward_pre_hook(lambda _m, args: seen.append(type(args[0]).__name__))
    sched = pp.Schedule1F1B(stage, 2, loss_fn=torch.nn.functional.mse_loss)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    sched.step(x if pp_rank == 0 else None, target=y if pp_rank == 1 else None)
    torch.nn.functional.mse_loss(ref[1](ref[0](x)), y).backward()
    for (n, p), q in zip(mine.named_parameters(), ref[pp_rank].parameters()):
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        torch.testing.assert_close(grad, q.grad, **TOL, msg=lambda t, n=n: f"stage {pp_rank} {n}: {t}")
    if pp_rank == 1:
        assert set(seen[1:]) == {"DTensor"}, seen  # after shape inference, every microbatch input is a DTensor


def _pp_fsdp_tp(shape, name):
    """PP x FSDP x TP on the 3-D mesh ``shape`` = (pp, dp, tp): each stage TP-parallel over ``tp``, then
    ``fully_shard`` over ``dp`` (its parameters are DTensors on the 2-D (dp, tp) sub-mesh); 2 SGD steps."""
    import copy
    import torch
    from torch import nn
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    from hyper_parallel import DTensor
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", shape, mesh_dim_names=("pp", "dp", "tp"))
    pp_rank, dp_rank, dp = mesh.get_local_rank("pp"), mesh.get_local_rank("dp"), shape[1]
    torch.manual_seed(0)
    parts = [nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8)) for _ in range(2)]
    ref = copy.deepcopy(parts)
    sub = mesh["dp", "tp"]  # the stage's 2-D (dp, tp) sub-mesh: FSDP x TP needs them as slices of one mesh
    mine = parallelize_module(parts[pp_rank], sub["tp"], {
        "0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=pp_rank == 1)})
    hp.fully_shard(mine, mesh=sub["dp"], reshard_after_forward=False)
    stage = pp.PipelineStage(mine, pp_rank, 2, "cpu", group=mesh["pp"].get_group())
    sched = pp.get_schedule_class(name)([stage] if name != "1F1B" else stage, 2,
                                        loss_fn=torch.nn.functional.mse_loss, stages_per_rank=1)
    opt = torch.optim.SGD(mine.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD([p for r in ref for p in r.parameters()], lr=0.1)
    for step in range(2):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
        rows = slice(8 // dp * dp_rank, 8 // dp * (dp_rank + 1))
        sched.step(x[rows] if pp_rank == 0 else None, target=y[rows] if pp_rank == 1 else None)
        torch.nn.functional.mse_loss(ref[1](ref[0](x)), y).backward()
        for (n, p), q in zip(mine.named_parameters(), ref[pp_rank].parameters()):
            assert isinstance(p, DTensor) and p.device_mesh.ndim == 2, (n, p.device_mesh)  # on (dp, tp)
            torch.testing.assert_close(p.grad.full_tensor(), q.grad, **TOL,
                                       msg=lambda t, n=n: f"{shape} {name} stage {pp_rank} {n}: {t}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        for p, q in zip(mine.parameters(), ref[pp_rank].parameters()):
            torch.testing.assert_close(p.full_tensor(), q, **TOL)


@multi_rank(world_size=4, timeout=300)
def test_pp_x_fsdp_x_tp_matches_one_process():
    """4 ranks hold pp=2 x (dp*tp)=2: both factorisations of the 2-D (dp, tp) sub-mesh, 1F1B and ZB-H1."""
    _pp_fsdp_tp((2, 1, 2), "1F1B")
    _pp_fsdp_tp((2, 2, 1), "InterleavedZeroBubble")
