# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: expert parallelism where 4 ranks or a 2-D mesh is the point: EP=4, ETP on a [ep, tp] = (2, 2)
mesh, EP + expert-FSDP on the (efsdp, ep) = (2, 2) expert mesh, and the tiny Llama MoE plan with
EP=4 + FSDP + TP on a (dp, tp) = (2, 2) mesh; the Llama MoE under TP x PP through the trainer. Same parity
protocol as ``test_moe.py``."""
import copy

from hyper_parallel.testing import multi_rank
from tests.st.torch.test_moe import (TOL, check_grads, expert_parallel, global_batch, is_sharded, llama_moe_parity,
                                     make_moe, run_parity)


@multi_rank(world_size=4, timeout=180)
def test_ep4_parity_one_and_two_local_experts():
    import torch.distributed as dist
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (4,))
    for num_experts in (4, 8):
        ref = make_moe(num_experts=num_experts, top_k=2, num_shared_experts=1, route_norm=True)
        model = expert_parallel(copy.deepcopy(ref), mesh)
        assert model.experts.num_local_experts == num_experts // 4
        x, w = global_batch((8, 5, 8), seed=num_experts)
        run_parity(model, ref, x, w, dist.get_rank(), 4)


@multi_rank(world_size=4, timeout=180)
def test_etp_2x2_parity():
    """Experts over ep, each expert's hidden dim over tp; the tp ranks of one ep rank hold the same tokens."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel.moe import ExpertTensorParallel
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "tp"))
    ep_rank = mesh.get_coordinate()[0]
    ref = make_moe(top_k=2, num_shared_experts=1)
    model = hp.parallelize_module(copy.deepcopy(ref), mesh, {"experts": ExpertTensorParallel()})
    w1 = model.experts.gate_proj
    assert w1.placements == (hp.Shard(0), hp.Shard(1)) and tuple(w1.to_local().shape) == (2, 8, 8)
    assert model.experts.down_proj.placements == (hp.Shard(0), hp.Shard(2))
    x, w = global_batch((4, 6, 8), seed=11)
    xs = x.chunk(2)[ep_rank].clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    out, ref_out = model(xs), ref(xr)
    torch.testing.assert_close(out, ref_out.chunk(2)[ep_rank], **TOL)
    (out * w.chunk(2)[ep_rank]).sum().backward()
    (ref_out * w).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad.chunk(2)[ep_rank], **TOL)
    check_grads(model, ref, group=mesh.get_group("ep"))


@multi_rank(world_size=4, timeout=240)
def test_ep_with_expert_fsdp_five_adamw_steps():
    """Expert mesh (efsdp, ep) = (2, 2) from the mesh rule: experts EP over ep and fully_shard over efsdp;
    router and shared experts fully_shard over all 4 ranks; each rank its own quarter of the batch."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.moe import fully_shard_experts, init_expert_mesh
    rank = dist.get_rank()
    world = hp.init_device_mesh("cpu", (4,))
    emesh = init_expert_mesh("cpu", dp_shard=4, ep=2)
    assert emesh.shape == (2, 2) and emesh.mesh_dim_names == ("efsdp", "ep")
    ref = make_moe(top_k=2, num_shared_experts=1)
    model = expert_parallel(copy.deepcopy(ref), emesh["ep"])
    fully_shard_experts(model.experts, emesh)
    hp.fully_shard(model, mesh=world)
    assert model.experts.gate_proj.placements == (hp.Shard(0), hp.Shard(0))
    assert tuple(model.experts.gate_proj.to_local().shape) == (1, 16, 8)
    opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref))
    for step in range(5):
        x, y = global_batch((8, 4, 8), seed=20 + step)
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward()
        loss = F.mse_loss(model(x.chunk(4)[rank]), y.chunk(4)[rank])
        loss.backward()
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.testing.assert_close(mean / 4, ref_loss.detach(), **TOL)
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        assert is_sharded(p)
        torch.testing.assert_close(p.full_tensor(), ref_params[name].detach(), **TOL, msg=lambda m, n=name: f"{n}: {m}")


@multi_rank(world_size=4, timeout=300)
def test_llama_debug_moe_ep4_fsdp_tp_matches_one_process():
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = llama_moe_parity(mesh, ep=4)
    assert model.model.layers[1].mlp.experts.num_local_experts == 1
    assert model.model.layers[0].self_attn.q_proj.weight.placements == (hp.Shard(0), hp.Shard(0))


@multi_rank(world_size=4, timeout=300)
def test_llama_debug_moe_etp_on_ep_tp_mesh_matches_one_process():
    """ETP in the Llama plan: (dp, tp) = (2, 2), experts on the [ep, etp] = (2, 2) mesh (2 experts per ep rank,
    hidden dim split over tp), rows of the tp pair gathered; loss, parameters and biases equal one process."""
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = llama_moe_parity(mesh, ep=2, etp=2)
    experts = model.model.layers[1].mlp.experts
    assert experts.num_local_experts == 2 and experts.gate_proj.placements == (hp.Shard(0), hp.Shard(1))
    assert experts.grad_scale == 0.5


@multi_rank(world_size=4, timeout=300)
def test_pp2_1f1b_with_ep2_in_every_stage_matches_one_process():
    """Mesh (pp, ep) = (2, 2): two pipelines (each a data-parallel replica) of 2 stages, each stage a
    Linear + MoE whose experts are expert-parallel over the stage's ep pair. 1F1B with 4 microbatches
    keeps two forwards in flight before their backwards on stage 0; 2 SGD steps against the whole
    model on the whole batch: loss, every gradient and every parameter equal."""
    import torch
    import torch.distributed as dist
    from torch import nn
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    from hyper_parallel.moe import ExpertParallel
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "ep"))
    stage, ep_rank = mesh.get_coordinate()
    blocks = []
    for s in range(2):
        torch.manual_seed(30 + s)
        blocks.append(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), make_moe(seed=40 + s, top_k=2, num_shared_experts=1)))
    ref = copy.deepcopy(blocks)
    block = blocks[stage]
    hp.parallelize_module(block, mesh["ep"], {"2.experts": ExpertParallel()})
    sched = pp.Schedule1F1B(pp.PipelineStage(block, stage, 2, "cpu", group=mesh.get_group("pp")), 4,
                            loss_fn=torch.nn.functional.mse_loss)
    order = [str(a) for a in sched.pipeline_order[0]]
    assert order.index("0F1") < order.index("0B0")  # two microbatches in flight on stage 0
    opt = torch.optim.SGD(block.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD([p for b in ref for p in b.parameters()], lr=0.1)
    ep_group = mesh.get_group("ep")
    for step in range(2):
        x, y = global_batch((16, 8), seed=50 + step)
        losses = []
        sched.step(x.chunk(2)[ep_rank] if stage == 0 else None, target=y.chunk(2)[ep_rank] if stage == 1 else None,
                   losses=losses)
        ref_loss = torch.nn.functional.mse_loss(ref[1](ref[0](x)), y)
        ref_loss.backward()
        if stage == 1:
            mean = (sum(losses) / 4).detach().clone()
            dist.all_reduce(mean, group=ep_group)
            torch.testing.assert_close(mean / 2, ref_loss.detach(), **TOL)
        for p in block.parameters():  # data parallel over ep: average; experts already sum both ranks' tokens
            local = p.grad.to_local() if isinstance(p.grad, hp.DTensor) else p.grad
            if not is_sharded(p):
                dist.all_reduce(local, group=ep_group)
            local.div_(2)
        ref_params = dict(ref[stage].named_parameters())
        for name, p in block.named_parameters():
            g = p.grad.to_local() if isinstance(p.grad, hp.DTensor) else p.grad
            full = hp.DTensor.from_local(g, p.device_mesh, p.placements).full_tensor() if is_sharded(p) else g
            torch.testing.assert_close(full, ref_params[name].grad, **TOL, msg=lambda m, n=name: f"grad {n}: {m}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
    for name, p in block.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p.detach()
        torch.testing.assert_close(full, dict(ref[stage].named_parameters())[name].detach(), **TOL)



@multi_rank(world_size=4, timeout=600)
def test_llama_debug_moe_tp2_pp2_trainer_matches_one_process(tmp_path, trainer_cache_dir):
    """``llama3_moe tp=2 pp=2`` through ``LLMTrainer`` (1F1B, 2 microbatches): one dense data-parallel rank per stage,
    so the stage module is not ``fully_shard`` -ed while its MoE routers, shared experts and experts are (over the
    stage's tp pair); the stage defers their reductions to its REDUCE_GRAD (``PipelineStage.fsdp_modules``). Before,
    each microbatch's backward reduced them on its own and the step-1 grad norm was already off (final parameters
    3e-2): FSDP dropped the second in-flight backward's reduction, fixed since (``test_fsdp.py::
    test_fsdp_forwards_in_flight_reduce_per_backward``); the deferral now only saves communication. Losses, grad norms and final parameters equal one process."""
    from tests.st.torch.test_moe_trainer import _run
    _run("pp_tp_4ranks.toml", str(tmp_path / "pp_tp"), trainer_cache_dir,
         [("model.name", "llama3"), ("model.flavor", "debug_moe"), ("training.steps", 3),
          ("parallelism.pp_microbatches", 2)], 1)
