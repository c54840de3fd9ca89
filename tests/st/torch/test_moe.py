# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: mixture of experts with expert parallelism on 2 gloo ranks, against the same computation on one
process.

Protocol of a parity case: every rank builds the same MoE (same seed), one copy stays whole as the
single-process reference and runs on the global batch; the other is parallelised and runs on this
rank's slice. The loss is ``sum(out * W)`` (a fixed random ``W``), so the reference gradient is the
sum of the ranks' gradients: replicated parameters (router, shared experts) are summed over the
ranks, expert shards are compared as they are (each expert's gradient already sums every rank's
tokens). Forward, input gradient and every parameter gradient are compared in fp32 (``1e-5``).
"""
import copy

import pytest

from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- helpers (run in the ranks)
def make_moe(seed=0, **kw):
    """A small MoE, identical on every rank (4 experts of 8 -> 16 -> 8 by default)."""
    import torch
    from hyper_parallel.moe import MoE, MoEConfig
    base = dict(num_experts=4, top_k=2, dim=8, hidden_dim=16, load_balance=None)
    base.update(kw)
    torch.manual_seed(seed)
    moe = MoE(MoEConfig(**base))
    moe.router.reset_parameters(std=0.5)  # decisive routing: no near-ties between experts
    return moe


def global_batch(shape, seed=1):
    """Input and loss weights of the global batch (identical on every rank)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


def full_grad(p):
    """The whole gradient of a (possibly DTensor) parameter."""
    from hyper_parallel import DTensor
    g = p.grad
    if isinstance(g, DTensor):
        return g.full_tensor()
    if isinstance(p, DTensor):
        return DTensor.from_local(g, p.device_mesh, p.placements, shape=p.shape).full_tensor()
    return g


def is_sharded(p):
    """True for parameters sharded over the mesh (their gradient is not summed over ranks)."""
    from hyper_parallel import DTensor
    return isinstance(p, DTensor) and any(pl.is_shard() for pl in p.placements)


def check_grads(model, ref, group=None):
    """Every parameter gradient of ``model`` equals ``ref``'s (replicated ones summed over ``group``)."""
    import torch
    import torch.distributed as dist
    ref_params = dict(ref.named_parameters())
    names = []
    for name, p in model.named_parameters():
        g = full_grad(p)
        if not is_sharded(p):
            g = g.clone()
            dist.all_reduce(g, group=group)
        torch.testing.assert_close(g, ref_params[name].grad, **TOL, msg=lambda m, n=name: f"grad {n}: {m}")
        names.append(name)
    assert sorted(names) == sorted(ref_params)


def run_parity(model, ref, x, w, rank, world, group=None):
    """Forward on this rank's slice vs the reference on the whole batch; backward of sum(out * W)."""
    import torch
    xs = x.chunk(world)[rank].clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    out = model(xs)
    ref_out = ref(xr)
    torch.testing.assert_close(out, ref_out.chunk(world)[rank], **TOL)
    (out * w.chunk(world)[rank]).sum().backward()
    (ref_out * w).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad.chunk(world)[rank], **TOL)
    check_grads(model, ref, group)
    return out


def expert_parallel(model, mesh, **style_kw):
    """Apply ``ExpertParallel`` to the MoE's experts through ``parallelize_module``."""
    import hyper_parallel as hp
    from hyper_parallel.moe import ExpertParallel
    return hp.parallelize_module(model, mesh, {"experts": ExpertParallel(**style_kw)})


# ---------------------------------------------------------------------- EP = 2 parity
CASES = {
    "top1": dict(top_k=1),
    "top2_shared_norm": dict(top_k=2, num_shared_experts=1, route_norm=True),
    "sigmoid_groups_scale_shared": dict(top_k=2, score_func="sigmoid", n_groups=2, topk_groups=1, route_scale=2.0,
                                        num_shared_experts=2),
    # every token to expert 0: rank 1's experts get no token at all
    "skewed_top1": dict(top_k=1, load_balance="expert_bias", bias=[10.0, 0.0, 0.0, 0.0]),
    "skewed_top2_shared": dict(top_k=2, load_balance="expert_bias", bias=[10.0, 9.0, 0.0, 0.0], num_shared_experts=1),
    "sync_dispatch": dict(top_k=2, num_shared_experts=1, style=dict(async_dispatch=False)),
    "loop_kernel": dict(top_k=2, dim=6, hidden_dim=5),
    "all_gather_baseline": dict(top_k=2, num_shared_experts=1, style=dict(dispatcher="all_gather")),
}


@pytest.mark.parametrize("case", sorted(CASES))
@multi_rank(world_size=2, timeout=120)
def test_ep2_parity(case):
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    kw = dict(CASES[case])
    bias, style = kw.pop("bias", None), kw.pop("style", {})
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_moe(**kw)
    if bias is not None:
        ref.expert_bias.copy_(torch.tensor(bias))
    model = expert_parallel(copy.deepcopy(ref), mesh, **style)
    assert model.experts.num_local_experts == 2
    if kw.get("dim") == 6:
        assert model.experts.kernel() == "loop"
    x, w = global_batch((4, 6, kw.get("dim", 8)))
    run_parity(model, ref, x, w, rank, 2)
    if bias is not None:
        assert ref.tokens_per_expert.tolist()[2:] == [0, 0]  # rank 1's experts got nothing
        mine = model.tokens_per_expert.clone()
        dist.all_reduce(mine)
        assert mine.tolist() == ref.tokens_per_expert.tolist()


@multi_rank(world_size=2, timeout=120)
def test_ep2_five_adamw_steps_loss_and_parameters():
    """Data parallel over the 2 ranks: mean loss per rank; replicated gradients averaged, expert
    gradients divided by ep (each already sums both ranks' tokens)."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_moe(top_k=2, num_shared_experts=1)
    model = expert_parallel(copy.deepcopy(ref), mesh)
    opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref))
    for step in range(5):
        x, y = global_batch((4, 6, 8), seed=10 + step)
        ref_loss = torch.nn.functional.mse_loss(ref(x), y)
        ref_loss.backward()
        loss = torch.nn.functional.mse_loss(model(x.chunk(2)[rank]), y.chunk(2)[rank])
        loss.backward()
        for p in model.parameters():
            local = p.grad.to_local() if isinstance(p.grad, hp.DTensor) else p.grad
            if is_sharded(p):
                local.div_(2)
            else:
                dist.all_reduce(local)
                local.div_(2)
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.testing.assert_close(mean / 2, ref_loss.detach(), **TOL)
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p.detach()
        torch.testing.assert_close(full, ref_params[name].detach(), **TOL, msg=lambda m, n=name: f"{n}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_two_interleaved_forwards_before_their_backwards():
    """Two micro-batches in flight (forward A, forward B, backward B, backward A): the per-call
    DispatchContext keeps them apart; gradients equal the reference's for both."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_moe(top_k=2, num_shared_experts=1)
    model = expert_parallel(copy.deepcopy(ref), mesh)
    dispatcher = model.experts.dispatcher
    config_before = dict(vars(dispatcher))
    (xa, wa), (xb, wb) = global_batch((4, 6, 8), seed=3), global_batch((4, 6, 8), seed=4)
    out_a = model(xa.chunk(2)[rank])
    out_b = model(xb.chunk(2)[rank])
    assert vars(dispatcher) == config_before  # nothing of either call was kept on the dispatcher
    (out_b * wb.chunk(2)[rank]).sum().backward()
    (out_a * wa.chunk(2)[rank]).sum().backward()
    ref_a, ref_b = ref(xa), ref(xb)
    torch.testing.assert_close(out_a, ref_a.chunk(2)[rank], **TOL)
    torch.testing.assert_close(out_b, ref_b.chunk(2)[rank], **TOL)
    ((ref_a * wa).sum() + (ref_b * wb).sum()).backward()
    check_grads(model, ref)


@multi_rank(world_size=2, timeout=120)
def test_capacity_factor_drops_like_one_process_per_rank_batch():
    """Capacity applies to each rank's call (its own tokens): the reference runs the same layer on each
    rank's slice separately, on one process."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_moe(top_k=2, capacity_factor=0.5, load_balance="expert_bias")
    ref.expert_bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))  # expert 0 oversubscribed: it drops
    model = expert_parallel(copy.deepcopy(ref), mesh)
    x, w = global_batch((4, 6, 8), seed=5)
    xs = x.chunk(2)[rank].clone().requires_grad_(True)
    out = model(xs)
    (out * w.chunk(2)[rank]).sum().backward()
    ref_x = [c.clone().requires_grad_(True) for c in x.chunk(2)]
    ref_out = [ref(c) for c in ref_x]
    torch.testing.assert_close(out, ref_out[rank], **TOL)
    sum((o * c).sum() for o, c in zip(ref_out, w.chunk(2))).backward()
    torch.testing.assert_close(xs.grad, ref_x[rank].grad, **TOL)
    check_grads(model, ref)
    # something was dropped: the dropless layer gives a different output
    ref.config = type(ref.config)(**{**ref.config.__dict__, "capacity_factor": None})
    assert (ref(x.chunk(2)[rank]) - out).abs().max() > 0.05 * out.abs().max()


@multi_rank(world_size=2, timeout=120)
def test_aux_loss_sequence_level_under_checkpoint_matches_one_process():
    """EP=2 with the sequence-level auxiliary loss, the MoE block recomputed by torch.utils.checkpoint:
    gradients equal the single-process layer (no checkpoint) on the whole batch, and the token counts
    are not double-counted."""
    import torch
    import torch.distributed as dist
    from torch.utils.checkpoint import checkpoint
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_moe(top_k=2, num_shared_experts=1, load_balance="aux_loss", aux_loss_coeff=0.5,
                   aux_loss_level="sequence")
    model = expert_parallel(copy.deepcopy(ref), mesh)
    x, w = global_batch((4, 6, 8), seed=6)
    xs = x.chunk(2)[rank].clone().requires_grad_(True)
    out = checkpoint(model, xs, use_reentrant=False)
    # the global loss is the sum of the ranks' losses; every rank's aux loss (mean over its own 2 of
    # the 4 sequences) enters it once with the weight that makes the sum the mean over 4 sequences
    from hyper_parallel.moe import MoEAuxLossAutoScaler
    MoEAuxLossAutoScaler.set_loss_scale(0.5)
    try:
        (out * w.chunk(2)[rank]).sum().backward()
    finally:
        MoEAuxLossAutoScaler.set_loss_scale(1.0)
    ref_out = ref(x)
    (ref_out * w).sum().backward()
    torch.testing.assert_close(out, ref_out.chunk(2)[rank], **TOL)
    check_grads(model, ref)
    counts = model.tokens_per_expert.clone()
    dist.all_reduce(counts)
    assert counts.tolist() == ref.tokens_per_expert.tolist() and int(counts.sum()) == 4 * 6 * 2
    aux = model.aux_loss.clone()
    dist.all_reduce(aux)
    torch.testing.assert_close(aux / 2, ref.aux_loss, **TOL)


@multi_rank(world_size=2, timeout=120)
def test_expert_bias_balances_a_skewed_task_identically_on_every_rank():
    """Inputs share a direction the gate maps to expert 0: routing starts skewed. 50 AdamW steps with
    the load-balancing pre-step hook: the max/mean load falls and the bias is bit-identical."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.moe import register_moe_load_balancing_hook
    from hyper_parallel.moe.balance import load_ratio
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    model = make_moe(top_k=2, num_experts=8, score_func="sigmoid", load_balance="expert_bias", bias_update_rate=1e-2)
    g = torch.Generator().manual_seed(7)
    direction = torch.randn(8, generator=g)
    with torch.no_grad():
        model.router.gate.weight[0] = 0.3 * direction  # expert 0 favoured by almost every token
    model = expert_parallel(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    register_moe_load_balancing_hook(model, opt)
    ratios = []
    for step in range(50):
        gs = torch.Generator().manual_seed(100 + 2 * step + rank)  # each rank its own data
        x = torch.randn(8, 8, 8, generator=gs) + direction
        (model(x) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        ratios.append(load_ratio(model.global_tokens_per_expert))
    assert sum(model.global_tokens_per_expert) == 2 * 8 * 8 * 2
    first, last = ratios[0], sum(ratios[-10:]) / 10
    assert first > 3.0 and last < 0.6 * first, (first, last, ratios)
    biases = [torch.zeros(8) for _ in range(2)]
    dist.all_gather(biases, model.expert_bias)
    assert torch.equal(biases[0], biases[1])
    assert biases[0][0] < 0 < biases[0][1:].max()


@multi_rank(world_size=2, timeout=120)
def test_bad_expert_parallel_configs_name_the_values():
    import hyper_parallel as hp
    from hyper_parallel.moe import ExpertTensorParallel, init_expert_mesh
    mesh = hp.init_device_mesh("cpu", (2,))
    with pytest.raises(ValueError, match=r"num_experts=3 is not divisible by the expert-parallel degree ep=2"):
        expert_parallel(make_moe(num_experts=3, top_k=1), mesh)
    with pytest.raises(ValueError, match=r"dp_shard\*cp\*tp = 4\*1\*1 = 4 ranks but the world has 2"):
        init_expert_mesh("cpu", dp_shard=4, ep=2)
    with pytest.raises(ValueError, match=r"ep\*etp = 4\*1 = 4 does not divide dp_shard\*cp\*tp = 2\*1\*1 = 2"):
        init_expert_mesh("cpu", dp_shard=2, ep=4)
    with pytest.raises(ValueError, match="expected a 2-D"):
        hp.parallelize_module(make_moe(), mesh, {"experts": ExpertTensorParallel()})
    with pytest.raises(TypeError, match="applies to GroupedExperts"):
        hp.parallelize_module(make_moe(), mesh, {"router": ExpertTensorParallel()})


# ---------------------------------------------------------------------- the tiny Llama MoE variant
def llama_moe_parity(mesh, ep, steps=3, tol=1e-4, etp=1):
    """``parallelize_llama_moe`` on ``TINY_CONFIGS["debug_moe"]`` with the expert-bias hook: AdamW steps
    against one process (whose bias follows the same rule on the whole batch's counts): loss, every
    parameter and the expert biases equal."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM, parallelize_llama_moe
    from hyper_parallel.moe import MoE, register_moe_load_balancing_hook
    from hyper_parallel.moe.balance import bias_update
    cfg = TINY_CONFIGS["debug_moe"]
    torch.manual_seed(0)
    ref = LlamaForCausalLM(cfg)
    for m in ref.modules():
        if isinstance(m, MoE):
            m.router.reset_parameters(std=0.5)  # decisive routing (no near-ties between experts)
    model = parallelize_llama_moe(copy.deepcopy(ref), mesh, ep=ep, etp=etp)
    dp_rank = mesh.get_coordinate()[0]
    dp = mesh.shape[0]
    opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, ref))
    register_moe_load_balancing_hook(model, opt)
    ref_moes = [m for m in ref.modules() if isinstance(m, MoE)]
    moes = [m for m in model.modules() if isinstance(m, MoE)]

    def loss_of(m, ids):
        logits = m(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1))

    for step in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (4, 16), generator=torch.Generator().manual_seed(step))
        ref_loss = loss_of(ref, ids)
        ref_loss.backward()
        for m in ref_moes:
            with torch.no_grad():
                m.expert_bias += torch.tensor(bias_update(m.tokens_per_expert.tolist(), m.config.bias_update_rate))
                m.tokens_per_expert.zero_()
        ref_opt.step()
        ref_opt.zero_grad()
        loss = loss_of(model, ids.chunk(dp)[dp_rank])
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.testing.assert_close(mean / dist.get_world_size(), ref_loss.detach(), rtol=tol, atol=tol)
    for m, r in zip(moes, ref_moes):
        torch.testing.assert_close(m.expert_bias, r.expert_bias, rtol=0, atol=0)
        assert r.expert_bias.abs().sum() > 0
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.full_tensor(), ref_params[name].detach(), rtol=tol, atol=tol,
                                   msg=lambda m, n=name: f"{n}: {m}")
    return model


@multi_rank(world_size=2, timeout=180)
def test_llama_debug_moe_etp2_sequence_parallel_matches_one_process():
    """ETP with ep = 1 on (dp, tp) = (1, 2): the experts' hidden dim split over the tp ranks, which route their
    own sequence shards: their rows are gathered over tp, the partial outputs reduce-scattered back."""
    import hyper_parallel as hp
    model = llama_moe_parity(hp.init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp")), ep=1, etp=2)
    experts = model.model.layers[1].mlp.experts
    assert experts.tp_gather_tokens and experts.gate_proj.placements == (hp.Shard(1),)
    assert experts.gate_proj.to_local().shape[1] * 2 == experts.hidden_dim


@multi_rank(world_size=2, timeout=180)
def test_llama_debug_moe_ep2_fsdp_matches_one_process():
    import hyper_parallel as hp
    from hyper_parallel.moe import AllToAllTokenDispatcher
    model = llama_moe_parity(hp.init_device_mesh("cpu", (2,)), ep=2)
    experts = model.model.layers[1].mlp.experts
    assert isinstance(experts.dispatcher, AllToAllTokenDispatcher) and experts.num_local_experts == 2
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"
