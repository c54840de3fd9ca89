# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (4 gloo ranks): sharded Muon where a 2-D mesh is the point — FSDP x TP, HSDP, experts under
EP x expert-FSDP — and clip_grad_norm_ over pipeline stages that each hold FSDP and EP gradients.
Same protocol as ``test_optim.py``: fixed full gradients, bit-identical parameters after 5 steps,
every rank's counted FLOPs within 10 % of the mean."""


from hyper_parallel.testing import multi_rank
from tests.st.torch.test_optim import (check_work_split, full_grads, hidden_matrices, llama, muon_parity,
                                       set_grads)


@multi_rank(world_size=4, timeout=180)
def test_muon_fsdp_x_tp_2x2_equals_torch_muon():
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import parallelize_llama
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model, ref = llama()
    parallelize_llama(model, mesh["tp"])
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh["dp"])
    hp.fully_shard(model, mesh=mesh["dp"])
    params = hidden_matrices(model)
    assert {p.placements for p in params.values()} == {(hp.Shard(0), hp.Shard(0)), (hp.Shard(0), hp.Shard(1))}
    opt = muon_parity(params, hidden_matrices(ref), lr=0.02, weight_decay=0.1)
    check_work_split(opt, len(params))


@multi_rank(world_size=4, timeout=180)
def test_muon_hsdp_2x2_replicas_share_the_work():
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model, ref = llama()
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh)
    hp.fully_shard(model, mesh=mesh)
    params = hidden_matrices(model)
    assert {p.placements for p in params.values()} == {(hp.Replicate(), hp.Shard(0))}
    opt = muon_parity(params, hidden_matrices(ref), lr=0.01, adjust_lr="original")
    check_work_split(opt, len(params))


@multi_rank(world_size=4, timeout=180)
def test_muon_experts_ep_x_efsdp_and_dense_fsdp():
    """Expert weights [8, 16, 12] / [8, 12, 16] on an (ep=2, efsdp=2) mesh: Shard(0) over ep, Shard(1) over
    efsdp; dense matrices fully sharded over the flat 4-rank mesh."""
    import torch
    import hyper_parallel as hp
    emesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "efsdp"))
    dmesh = hp.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    g = torch.Generator().manual_seed(8)
    full = {"experts.w1": torch.randn(8, 16, 12, generator=g), "experts.w2": torch.randn(8, 12, 16, generator=g),
            "dense.a": torch.randn(24, 16, generator=g), "dense.b": torch.randn(16, 24, generator=g),
            "dense.c": torch.randn(20, 20, generator=g)}
    ref = {n: torch.nn.Parameter(t.clone()) for n, t in full.items()}
    model = {}
    for n, t in full.items():
        if n.startswith("experts"):
            model[n] = torch.nn.Parameter(hp.distribute_tensor(t.clone(), emesh, [hp.Shard(0), hp.Shard(1)]))
        else:
            model[n] = torch.nn.Parameter(hp.distribute_tensor(t.clone(), dmesh, [hp.Shard(0)]))
    opt = muon_parity(model, ref, oracle="ours", lr=0.02, weight_decay=0.1)
    experts = [u for u in opt.work_plan().units if u.matrices > 1]
    # each EP rank's 4 experts are split into 2 chunks of 2, orthogonalised inside its efsdp pair
    assert len(experts) == 8 and all(u.matrices == 2 for u in experts)
    assert all(u.owner in ((0, 1) if u.region[0][0] < 4 else (2, 3)) for u in experts)
    check_work_split(opt, 2 * 8 + 3)


@multi_rank(world_size=4, timeout=180)
def test_clip_grad_norm_pipeline_stages_with_fsdp_and_expert_gradients():
    """(pp=2, dp=2): each stage holds its own layers fully sharded over its dp pair and its own experts on an
    EP mesh over the same pair; the norm is summed within each stage's meshes, then over the stage group."""
    import torch
    from torch import nn
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    emesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "ep"))
    stage = mesh.get_coordinate()[0]
    shapes = {}
    for s in range(2):
        shapes.update({f"s{s}.0.weight": (7, 5), f"s{s}.0.bias": (7,), f"s{s}.1.weight": (3, 7),
                       f"s{s}.1.bias": (3,), f"s{s}.experts": (4, 3, 5)})
    torch.manual_seed(stage)
    part = hp.fully_shard(nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 3)), mesh=mesh["dp"])
    mine = {f"s{stage}.{n}": p for n, p in part.named_parameters()}
    mine[f"s{stage}.experts"] = nn.Parameter(hp.distribute_tensor(torch.zeros(4, 3, 5), emesh["ep"], [hp.Shard(0)]))
    for norm_type in (2.0, float("inf")):
        grads = full_grads(shapes, 11)
        set_grads(mine, grads)
        ref = []
        for n, g in grads.items():
            p = nn.Parameter(torch.zeros_like(g))
            p.grad = g.clone()
            ref.append((n, p))
        want = torch.nn.utils.clip_grad_norm_([p for _, p in ref], 0.2, norm_type=norm_type)
        got = hp.clip_grad_norm_(mine.values(), 0.2, norm_type=norm_type, pp_group=mesh.get_group("pp"))
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        clipped = dict(ref)
        for n, p in mine.items():
            torch.testing.assert_close(p.grad.full_tensor(), clipped[n].grad, rtol=1e-6, atol=1e-7, msg=n)


@multi_rank(world_size=4, timeout=180)
def test_clip_grad_norm_tells_a_1d_mesh_from_a_2d_mesh_over_the_same_ranks():
    """A gradient sharded over a 1-D mesh of ranks 0..3 (the MoE router's dp x tp FSDP) and one sharded on dim 0 of
    a (2, 2) mesh over the same ranks (the experts' [ep, etp] mesh, dense FSDP x TP): the same rank list, but
    dim 0 is a different group in each. The norm equals one process (it was 0.07 % low on the MoE Llama when the
    two were grouped as one)."""
    import torch
    from torch import nn
    import hyper_parallel as hp
    flat = hp.init_device_mesh("cpu", (4,), mesh_dim_names=("dp_tp",))
    square = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "etp"))
    grads = full_grads({"flat": (8, 3), "square": (4, 6)}, 5)
    mine = {"flat": nn.Parameter(hp.distribute_tensor(torch.zeros(8, 3), flat, [hp.Shard(0)])),
            "square": nn.Parameter(hp.distribute_tensor(torch.zeros(4, 6), square, [hp.Shard(0), hp.Replicate()]))}
    set_grads(mine, grads)
    want = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads.values()]))
    torch.testing.assert_close(hp.clip_grad_norm_(mine.values(), 1e9), want, rtol=1e-6, atol=1e-7)
    # a step's loss summed in the norm's own all-reduces: one per rank set ((0, 1, 2, 3) and this rank's square
    # dim-0 pair), no collective of its own
    import torch.distributed as dist
    from hyper_parallel.optim._torch.clip import clip_grad_norm_and_sum_
    from hyper_parallel.platform.torch.collective_count import CollectiveCounter
    with CollectiveCounter() as counter:
        norm, sums = clip_grad_norm_and_sum_(mine.values(), 1e9, [(flat.get_group(0), dist.get_rank() + 1.0)])
    torch.testing.assert_close(norm, want, rtol=1e-6, atol=1e-7)
    assert sums == [10.0] and dict(counter.by_op) == {"all_reduce": 2}, (sums, counter.by_op)


@multi_rank(world_size=4, timeout=180)
def test_muon_on_the_moe_llama_with_ep_x_efsdp():
    """The tiny MoE Llama under parallelize_llama_moe (ep=2, efsdp=2; dense layers FSDP over 4 ranks):
    the factory's Muon takes the 3-D experts, routers and dense matrices; experts stay where they live
    (whole experts per rank after EP x efsdp), the rest is spread; 5 steps equal one process."""
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import parallelize_llama_moe
    from hyper_parallel.optim import get_hyper_optimizer
    mesh = hp.init_device_mesh("cpu", (4,))
    model, ref = llama("debug_moe")
    parallelize_llama_moe(model, mesh, ep=2)
    cfg = {"name": "muon", "lr": 0.02}
    ids = {id(p): n for n, p in ref.named_parameters()}
    names = [ids[id(p)] for g in get_hyper_optimizer(ref, cfg).optimizers[0].param_groups for p in g["params"]]
    experts = [n for n in names if ".experts." in n]
    assert len(experts) == 6 and all(dict(ref.named_parameters())[n].dim() == 3 for n in experts)
    params = {n: p for n, p in model.named_parameters() if n in names}
    opt = muon_parity(params, {n: p for n, p in ref.named_parameters() if n in names}, oracle="ours",
                      lr=0.02, weight_decay=0.1)
    assert all(u.is_local for u in opt.work_plan().units if u.matrices > 1)
    total = sum(u.matrices for u in opt.work_plan().units)
    check_work_split(opt, total)
