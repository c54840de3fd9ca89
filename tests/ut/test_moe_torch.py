# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process): the torch MoE layers against the pure reference semantics — the router token by
token, permutation round trips, the regroup index, grouped matmul vs the per-expert loop (and their
pitfalls), the aux loss against its formula, the auto-scaler, and counting under activation
checkpointing."""
import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.checkpoint import checkpoint

from hyper_parallel.moe import (DispatchContext, GroupedExperts, LocalTokenDispatcher, MoE, MoEAuxLossAutoScaler,
                                MoEConfig, TokenChoiceTopKRouter)
from hyper_parallel.moe.balance import aux_loss_value, sequence_aux_loss_value
from hyper_parallel.moe.planning import exchange_plan, permutation_order
from hyper_parallel.moe.routing import route_tokens
from hyper_parallel.moe._torch.dispatcher import _chunk_index, permute

TOL = dict(rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- router vs the reference
@settings(max_examples=40, deadline=None)
@given(score_func=st.sampled_from(["softmax", "sigmoid"]), groups=st.sampled_from([(1, 1), (2, 1), (4, 2)]),
       top_k=st.integers(1, 2), norm=st.booleans(), scale=st.sampled_from([1.0, 2.5]), biased=st.booleans(),
       seed=st.integers(0, 10_000))
def test_router_matches_reference_token_by_token(score_func, groups, top_k, norm, scale, biased, seed):
    torch.manual_seed(seed)
    n_groups, topk_groups = groups
    router = TokenChoiceTopKRouter(6, 8, top_k, score_func, norm, scale, n_groups, topk_groups)
    router.reset_parameters(std=1.0)
    x = torch.randn(12, 6)
    bias = torch.randn(8) * 0.3 if biased else None
    out = router(x, bias)
    logits = (x @ router.gate.weight.t()).double().tolist()
    experts, weights = route_tokens(logits, top_k=top_k, score_func=score_func, route_norm=norm, route_scale=scale,
                                    n_groups=n_groups, topk_groups=topk_groups,
                                    expert_bias=None if bias is None else bias.double().tolist())
    assert out.experts.tolist() == experts
    torch.testing.assert_close(out.weights, torch.tensor(weights, dtype=torch.float32), **TOL)
    assert out.scores.shape == (12, 8) and out.weights.requires_grad


# ---------------------------------------------------------------------- permutation / planning in torch
@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 9), k=st.integers(1, 3), cap=st.sampled_from([None, 0, 1, 2, 5]), seed=st.integers(0, 999))
def test_permute_matches_reference_and_round_trips(n, k, cap, seed):
    g = torch.Generator().manual_seed(seed)
    experts = torch.stack([torch.randperm(4, generator=g)[:k] for _ in range(n)]) if n else torch.zeros(0, k).long()
    order, counts = permute(experts, 4, cap)
    slots, ref_counts = permutation_order(experts.tolist(), 4, cap)
    assert order.tolist() == slots and counts.tolist() == ref_counts
    # dispatch -> identity experts -> combine with weights 1/k gives each kept token back (dropless)
    x = torch.randn(n, 3, generator=g)
    disp, ctx = LocalTokenDispatcher(4), DispatchContext()
    weights = torch.full((n, k), 1.0 / k)
    tokens, per_expert = disp.dispatch(x, experts, weights, ctx, cap)
    assert per_expert.tolist() == ref_counts and tokens.shape == (sum(ref_counts), 3)
    back = disp.combine(tokens, ctx)
    if cap is None:
        torch.testing.assert_close(back, x, **TOL)
    kept = torch.zeros(n)
    for s in slots:
        kept[s // k] += 1.0 / k
    torch.testing.assert_close(back, x * kept.unsqueeze(1), **TOL)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.data())
def test_chunk_index_equals_the_plan_regroup(ep, local, data):
    recv = [[data.draw(st.integers(0, 4)) for _ in range(local)] for _ in range(ep)]
    plan = exchange_plan(recv)
    got = _chunk_index(plan.chunk_starts, plan.chunk_lengths, "cpu")
    assert got.tolist() == plan.regroup_index()


def test_dispatch_context_is_per_call_and_checks_its_stage():
    disp = LocalTokenDispatcher(4)
    before = dict(vars(disp))
    x, experts, w = torch.randn(3, 2), torch.tensor([[0], [3], [0]]), torch.ones(3, 1)
    ctx = DispatchContext()
    with pytest.raises(RuntimeError, match="stage 'new', expected 'dispatched'"):
        disp.combine(x, ctx)
    disp.dispatch(x, experts, w, ctx)
    with pytest.raises(RuntimeError, match="one new DispatchContext per call"):
        disp.dispatch_start(x, experts, w, ctx)
    assert vars(disp) == before  # no per-call state on the dispatcher
    with pytest.raises(ValueError, match=r"experts and weights \[N, k\]"):
        disp.dispatch_start(x, experts[:2], w, DispatchContext())


# ---------------------------------------------------------------------- experts kernels
def _experts_pair(dim=8, hidden=16, e=4, dtype=torch.float32):
    torch.manual_seed(0)
    grouped = GroupedExperts(e, dim, hidden).to(dtype)
    loop = copy.deepcopy(grouped)
    grouped.use_grouped_mm, loop.use_grouped_mm = True, False
    return grouped, loop


@pytest.mark.parametrize("counts", [[3, 0, 4, 1], [0, 0, 0, 0], [0, 5, 0, 0]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm_equals_loop_forward_and_backward(counts, dtype):
    grouped, loop = _experts_pair(dtype=dtype)
    assert grouped.kernel() == "grouped_mm" and loop.kernel() == "loop"
    x = torch.randn(sum(counts), 8, dtype=dtype)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    outs = [m(xi, torch.tensor(counts)) for m, xi in zip((grouped, loop), xs)]
    tol = TOL if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for o in outs:
        o.sum().backward()  # an expanded (stride-0) gradient: grouped_mm's own backward rejects it
    torch.testing.assert_close(xs[0].grad, xs[1].grad, **tol)
    for (name, p), q in zip(grouped.named_parameters(), loop.parameters()):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, **tol)


def test_grouped_mm_raw_backward_bug_is_real():
    """What ``_DenseGrad`` guards against: torch 2.13's grouped matmul backward on an expanded gradient."""
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(2, 8, 16, requires_grad=True)
    y = torch._grouped_mm(x, w, offs=torch.tensor([1, 4], dtype=torch.int32))  # pylint: disable=protected-access
    with pytest.raises(RuntimeError, match="Invalid strides"):
        y.sum().backward()


def test_kernel_falls_back_to_loop_and_forcing_an_impossible_grouped_mm_fails():
    experts = GroupedExperts(3, 6, 5)
    assert experts.kernel() == "loop"  # 6 * 4 bytes is not a multiple of 16
    out = experts(torch.randn(4, 6), [1, 0, 3])
    assert out.shape == (4, 6)
    experts.use_grouped_mm = True
    with pytest.raises(ValueError, match="dim=6"):
        experts(torch.randn(4, 6), [1, 0, 3])
    assert GroupedExperts(2, 8, 8).double().kernel() == "loop"
    with pytest.raises(ValueError, match=r"one entry per local expert \(3\)"):
        GroupedExperts(3, 6, 5)(torch.randn(4, 6), [1, 3])


# ---------------------------------------------------------------------- MoE: aux loss, scaler, checkpointing
@pytest.mark.parametrize("level", ["batch", "sequence"])
@pytest.mark.parametrize("score_func", ["softmax", "sigmoid"])
def test_aux_loss_equals_its_formula(level, score_func):
    torch.manual_seed(1)
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=8, score_func=score_func, load_balance="aux_loss",
                        aux_loss_coeff=0.3, aux_loss_level=level))
    moe.router.reset_parameters(std=0.5)
    x = torch.randn(3, 5, 8)
    moe(x)
    route = moe.router(x.reshape(-1, 8))
    scores = route.scores.double()
    probs = scores if score_func == "softmax" else scores / scores.sum(-1, keepdim=True)
    experts = route.experts.tolist()
    if level == "batch":
        counts = [sum(row.count(e) for row in experts) for e in range(4)]
        want = aux_loss_value(counts, probs.sum(0).tolist(), 15, 2, 0.3)
    else:
        counts = [[sum(row.count(e) for row in experts[b * 5:(b + 1) * 5]) for e in range(4)] for b in range(3)]
        want = sequence_aux_loss_value(counts, probs.view(3, 5, 4).sum(1).tolist(), 5, 2, 0.3)
    assert moe.aux_loss.item() == pytest.approx(want, rel=1e-5)


def test_aux_loss_scaler_adds_gradient_without_changing_the_loss():
    torch.manual_seed(2)
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=8, load_balance="aux_loss", aux_loss_coeff=0.5))
    ref = copy.deepcopy(moe)
    ref.config = MoEConfig(**{**moe.config.__dict__, "load_balance": None})
    x = torch.randn(2, 6, 8)
    out = moe(x)
    loss = (out ** 2).mean()
    ref_out = ref(x)
    torch.testing.assert_close(out, ref_out, **TOL)  # the reported output (and loss) is unchanged
    ref_aux = ref._aux_loss(ref.router(x.reshape(-1, 8)), x)  # pylint: disable=protected-access
    ((ref_out ** 2).mean() + ref_aux).backward()
    loss.backward()
    for (name, p), q in zip(moe.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    assert moe.router.gate.weight.grad.abs().sum() > 0
    try:
        MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(0.0))
        for p in moe.parameters():
            p.grad = None
        (moe(x) ** 2).mean().backward()
        no_aux = copy.deepcopy(ref)
        for p in no_aux.parameters():
            p.grad = None
        (no_aux(x) ** 2).mean().backward()
        torch.testing.assert_close(moe.router.gate.weight.grad, no_aux.router.gate.weight.grad, **TOL)
    finally:
        MoEAuxLossAutoScaler.set_loss_scale(1.0)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_counts_once_and_injects_aux_gradient_once(reentrant):
    torch.manual_seed(3)
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=8, num_shared_experts=1, load_balance="aux_loss"))
    ckpt = copy.deepcopy(moe)
    x = torch.randn(2, 5, 8)
    (moe(x) ** 2).mean().backward()
    xc = x.clone().requires_grad_(True)
    (checkpoint(ckpt, xc, use_reentrant=reentrant) ** 2).mean().backward()
    assert ckpt.tokens_per_expert.tolist() == moe.tokens_per_expert.tolist()
    assert int(moe.tokens_per_expert.sum()) == 2 * 5 * 2
    for (name, p), q in zip(moe.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(q.grad, p.grad, **TOL, msg=lambda m, n=name: f"{n}: {m}")


def test_moe_rejects_bad_input_and_counts_only_in_training():
    moe = MoE(MoEConfig(num_experts=4, top_k=1, dim=8, hidden_dim=8))
    with pytest.raises(ValueError, match=r"expected \[batch, seq, 8\]"):
        moe(torch.randn(2, 3, 7))
    with pytest.raises(TypeError, match="MoEConfig"):
        MoE({"num_experts": 4})
    moe.eval()
    moe(torch.randn(2, 3, 8))
    assert int(moe.tokens_per_expert.sum()) == 0
    moe.train()
    moe(torch.randn(2, 3, 8))
    assert int(moe.tokens_per_expert.sum()) == 6


def test_dropped_tokens_keep_the_shared_expert_and_count_as_routed():
    """Token dropping (capacity_factor): each expert takes its first ``capacity`` slots in token order; a dropped
    slot adds nothing to its token's output, so a token whose every slot is dropped leaves the block with the
    shared experts' output alone (the decoder layer's residual carries it on). ``tokens_per_expert`` counts the
    routed slots (the demand the expert bias balances), dropped or not."""
    torch.manual_seed(4)
    cfg = dict(num_experts=4, top_k=2, dim=8, hidden_dim=8, num_shared_experts=1, load_balance="expert_bias")
    moe = MoE(MoEConfig(**cfg, capacity_factor=0.25))  # ceil(0.25 * 12 * 2 / 4) = 2 slots per expert
    moe.router.reset_parameters(std=0.5)
    dropless = copy.deepcopy(moe)
    dropless.config = MoEConfig(**cfg)
    x = torch.randn(12, 8)
    out = moe(x)
    experts = moe.router(x).experts.tolist()
    taken = {e: 0 for e in range(4)}
    kept = []
    for row in experts:  # first come, first served in token order
        mine = []
        for e in row:
            mine.append(taken[e] < 2)
            taken[e] += 1
        kept.append(mine)
    shared = moe.shared_experts(x)
    full = dropless(x)
    assert any(not any(k) for k in kept) and any(all(k) for k in kept)
    for t, k in enumerate(kept):
        if not any(k):
            torch.testing.assert_close(out[t], shared[t], **TOL)
        if all(k):
            torch.testing.assert_close(out[t], full[t], **TOL)
    assert moe.tokens_per_expert.tolist() == [sum(row.count(e) for row in experts) for e in range(4)]


def test_sinkhorn_balances_a_batch_whose_tokens_all_prefer_the_same_experts():
    """Every token's logits favour experts 0 and 1 by a margin far above the token-to-token variation (what the
    debug_moe router shows early in training): plain top-2 sends every token to 0 and 1; the Sinkhorn-balanced
    selection makes rows sum to 1 and columns to N / E, and its top-2 loads stay within 1.3 x the mean."""
    from hyper_parallel.moe._torch.router import sinkhorn_balance
    g = torch.Generator().manual_seed(5)
    logits = torch.tensor([3.0, 2.5, 0.0, -1.0]) + 0.05 * torch.randn(256, 4, generator=g)
    plain = torch.bincount(logits.topk(2, dim=-1).indices.reshape(-1), minlength=4)
    assert plain.tolist() == [256, 256, 0, 0]
    bal = sinkhorn_balance(logits, iters=50)
    torch.testing.assert_close(bal.sum(1), torch.ones(256), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bal.sum(0), torch.full((4,), 64.0), rtol=1e-4, atol=1e-4)
    loads = torch.bincount(bal.topk(2, dim=-1).indices.reshape(-1), minlength=4).float()
    assert loads.max() / loads.mean() <= 1.3 and loads.min() / loads.mean() >= 0.5, loads.tolist()
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=8, load_balance="sinkhorn"))
    x = torch.randn(64, 8, generator=g)
    moe(x)
    assert int(moe.tokens_per_expert.sum()) == 128  # trains and counts like any router
    moe.eval()
    with torch.no_grad():  # evaluation routes by plain top-k
        torch.testing.assert_close(moe(x), moe(x))


@pytest.mark.parametrize("experts,top_k,seed", [(8, 2, 0), (16, 4, 1), (64, 6, 2)])
def test_balance_top_k_balances_the_hard_top_k_where_the_soft_plan_does_not(experts, top_k, seed):
    """Near-identical tokens (variation 1e-3 around one preference): the Sinkhorn plan is balanced as a soft
    assignment, but its hard top-k is not (checked: above the tolerance); the per-expert offsets of
    ``balance_top_k`` bring every expert within ``BALANCE_TOL`` of the mean load, and leave an already balanced
    selection alone (zero rounds: the same ranking)."""
    from hyper_parallel.moe.api import BALANCE_TOL
    from hyper_parallel.moe._torch.router import balance_top_k, sinkhorn_balance
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(experts, generator=g) + 1e-3 * torch.randn(1024, experts, generator=g)

    def loads(sel):
        return torch.bincount(sel.topk(top_k, dim=-1).indices.reshape(-1), minlength=experts).double()

    soft = loads(sinkhorn_balance(logits))
    hard = loads(balance_top_k(sinkhorn_balance(logits), top_k))
    assert soft.max() > soft.mean() * (1 + BALANCE_TOL), soft.tolist()
    assert hard.max() <= hard.mean() * (1 + BALANCE_TOL) and hard.min() >= hard.mean() * (1 - BALANCE_TOL), hard
    even = torch.eye(experts).repeat(4, 1)  # every expert already takes the mean: nothing moves
    torch.testing.assert_close(balance_top_k(even, 1), even)
