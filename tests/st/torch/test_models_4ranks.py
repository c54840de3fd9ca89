# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (4 gloo ranks, one pool): each model's 2-D / 3-D plan trains like one process (5 AdamW steps).

* llama3 / qwen3: FSDP x TP (+SP) on a ``(dp_shard=2, tp=2)`` mesh;
* deepseek_v3: EP x TP x FSDP (MLA under TP; ``ep=2`` borrowed from ``dp_shard * tp = 4``, the experts
  fully sharded over the other 2).

Each data-parallel pair trains on its own half of the batch; the loss (mean over the dp ranks) must equal
one process's full-batch loss within 1e-5 relative at every step. Gradients after the first backward are
compared at 1e-5 of each tensor's largest gradient (measured: <= 1.3e-6). Parameters after 5 steps are
compared at the tolerance fp32 allows: AdamW moves every element by about ``lr`` whatever its gradient's
size, so an element with a ~0 gradient moves on summation-order noise; measured max abs difference
1.5e-5 (llama3) / 6e-6 (qwen3) -> checked at 5e-5, and 5.8e-4 (deepseek_v3, whose MoE top-k and
sharp step-5 loss drop amplify it) -> checked at 1e-3 (a tenth of one step of lr=1e-2).
"""
import pytest

from hyper_parallel.testing import multi_rank

#: AdamW's eps: with the default 1e-8 an element whose gradient is ~0 moves by about lr * sign(g), so the sign of
#: summation-order noise decides it and parameters differ by up to 2 lr on a few elements from one CPU to the next;
#: 1e-3 makes such an element move by ~lr * g / eps (the trained function is compared, not the noise)
EPS = 1e-3

LAYOUTS_4 = [
    ("llama3", "debug", {"dp_shard": 2, "tp": 2}, 5e-5),
    ("qwen3", "debug", {"dp_shard": 2, "tp": 2}, 5e-5),
    ("deepseek_v3", "debug", {"dp_shard": 2, "tp": 2, "ep": 2}, 1e-3),
]


def _full(t):
    import hyper_parallel as hp
    return t.full_tensor() if isinstance(t, hp.DTensor) else t


@pytest.mark.parametrize("model_name, flavor, layout, param_tol", LAYOUTS_4)
@multi_rank(world_size=4, timeout=300)
def test_2d_plan_trains_like_one_process(model_name, flavor, layout, param_tol):
    import copy
    import dataclasses
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models import ParallelDims, get_model_spec
    spec = get_model_spec(model_name)
    dims = ParallelDims(world_size=4, **layout)
    mesh = dims.build_mesh("cpu")
    torch.manual_seed(0)
    moe = spec.config(flavor).moe
    # the auxiliary load-balancing loss sees each rank's tokens only: switched off to compare the main loss
    ref = spec.build(flavor, moe=dataclasses.replace(moe, aux_loss_coeff=0.0)) if moe is not None else spec.build(flavor)
    ours = spec.parallelize_fn(copy.deepcopy(ref), mesh, dims)
    assert all(isinstance(p, hp.DTensor) for p in ours.parameters())
    ids = torch.randint(0, ref.config.vocab_size, (2, 16))
    labels = torch.randint(0, ref.config.vocab_size, (2, 16))
    dp = mesh.get_local_rank("dp_shard")
    opt, ref_opt = torch.optim.AdamW(ours.parameters(), lr=1e-2, eps=EPS), torch.optim.AdamW(ref.parameters(), lr=1e-2, eps=EPS)
    refp = dict(ref.named_parameters())
    got, want = [], []
    for step in range(5):
        loss = spec.loss_fn(ours(ids[dp:dp + 1]), labels[dp:dp + 1])
        loss.backward()
        ref_loss = spec.loss_fn(ref(ids), labels)
        ref_loss.backward()
        mean = torch.tensor([loss.item()])
        dist.all_reduce(mean)
        got.append(mean.item() / dist.get_world_size())  # tp ranks hold the same loss, dp ranks a half each
        want.append(ref_loss.item())
        if step == 0:
            for name, p in ours.named_parameters():
                g = refp[name].grad
                torch.testing.assert_close(_full(p.grad), g, rtol=1e-5, atol=1e-5 * g.abs().max().item(),
                                           msg=lambda m, n=name: f"{model_name} {layout} grad {n}: {m}")
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=0)
    for name, p in ours.named_parameters():
        torch.testing.assert_close(_full(p).detach(), refp[name].detach(), rtol=param_tol, atol=param_tol,
                                   msg=lambda m, n=name: f"{model_name} {layout} param {n}: {m}")


@pytest.mark.parametrize("model_name, layout", [
    ("llama3", {"dp_shard": 2, "tp": 2}),
    ("qwen3", {"dp_shard": 2, "tp": 2}),
    ("deepseek_v3", {"dp_shard": 2, "tp": 2, "ep": 2}),
])
@multi_rank(world_size=4, timeout=300)
def test_meta_plan_then_init_parameters_gives_one_process_weights(model_name, layout):
    """FSDP x TP (and EP) applied to a meta-device model, then ``init_parameters``: only local shards are
    materialised and the full weights equal one process's bit for bit."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models import ParallelDims, get_model_spec, init_empty_weights, init_parameters
    spec = get_model_spec(model_name)
    with init_empty_weights():
        single = spec.build("debug")
        ours = spec.build("debug")
    init_parameters(single, seed=5)
    dims = ParallelDims(world_size=4, **layout)
    spec.parallelize_fn(ours, dims.build_mesh("cpu"), dims)
    init_parameters(ours, seed=5)
    want = dict(single.named_parameters())
    local = full = 0
    for name, p in ours.named_parameters():
        assert isinstance(p, hp.DTensor), name
        local += p.to_local().numel()
        full += want[name].numel()
        assert torch.equal(p.full_tensor(), want[name].detach()), f"{model_name} {layout}: {name} differs"
    assert local <= full // 3  # 4 ranks hold about a quarter each (uneven shards round up)
    ids = torch.randint(0, spec.config("debug").vocab_size, (2, 8))
    torch.testing.assert_close(spec.loss_fn(ours(ids), ids), spec.loss_fn(single(ids), ids), rtol=1e-6, atol=0)


@pytest.mark.parametrize("model_name, layout", [
    ("llama3", {"tp": 2}),
    ("qwen3", {"tp": 2}),
    ("qwen3_moe", {"dp_shard": 2, "ep": 2}),
])
@multi_rank(world_size=4, timeout=300)
def test_pp_x_tp_or_ep_trains_like_one_process(model_name, layout):
    """PP=2 (1F1B) x TP=2 (+SP): the TP plan skips what each stage does not hold (the embedding on stage 1,
    the head on stage 0); qwen3's tied embedding / head are summed across the stages as TP shards.
    qwen3_moe: PP=2 x EP=2 x FSDP (each stage's experts expert-parallel over its dp_shard pair)."""
    from tests.st.torch.test_models import check_pp_gaps, pp_trains_like_one_process
    check_pp_gaps(f"{model_name} PP=2 x {layout}", pp_trains_like_one_process(model_name, 4, layout))
