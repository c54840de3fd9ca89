# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (4 gloo ranks): CP x TP on a (2, 2) mesh — the tiny Llama with heads sharded by TP and the sequence by
CP, plain local q/k/v and TP DTensors rewrapped around the CP kernel — against one process; and ring /
all-gather attention at cp=4 checked after every one of the 4 steps."""
import pytest

from hyper_parallel.testing import multi_rank
from tests.st.torch.test_cp import check_steps, cp_attention_vs_one_process, llama_batch


@pytest.mark.parametrize("qkv", ["local", "dtensor"])
@multi_rank(world_size=4, timeout=300)
def test_cp_x_tp_llama_matches_one_process(qkv):
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.cp import context_parallel_shard
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, llama_cp_plan, llama_tp_plan
    from hyper_parallel.tp import ColwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("cp", "tp"))
    torch.manual_seed(0)
    ref = LlamaForCausalLM(TINY_CONFIGS["debug"])
    ours = copy.deepcopy(ref)
    plan = llama_tp_plan(sequence_parallel=True)
    seen = []
    if qkv == "dtensor":  # q/k/v stay TP DTensors (heads sharded): the CP kernel runs on their local shards
        for n in ("q", "k", "v"):
            plan[f"model.layers.*.self_attn.{n}_proj"] = ColwiseParallel(use_local_output=False)
    parallelize_module(ours, mesh["tp"], plan)
    parallelize_module(ours, mesh["cp"], llama_cp_plan("ring"))
    ours.model.layers[0].self_attn.register_forward_hook(lambda m, a, out: seen.append(type(out).__name__))
    ours.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, a, out: seen.append(type(out).__name__))
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ours, ref)]
    cp_group = mesh["cp"].get_group(0)
    for step in range(3):
        ids, labels, pos = llama_batch(step)
        want = LlamaForCausalLM.loss(ref(ids), labels)
        want.backward()
        ids, labels, pos = context_parallel_shard(mesh["cp"], [ids, labels, pos], [1, 1, 0])
        loss = LlamaForCausalLM.loss(ours(ids, position_ids=pos), labels)
        loss.backward()
        for p in ours.parameters():  # average the TP-local gradient shards over the CP ranks
            local = p.grad.to_local() if isinstance(p.grad, hp.DTensor) else p.grad
            dist.all_reduce(local, group=cp_group)
            local /= 2
        if step == 0:
            for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
                g = p.grad.full_tensor() if isinstance(p.grad, hp.DTensor) else p.grad
                torch.testing.assert_close(g, q.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{qkv} {n}: {m}")
        mine = loss.detach().clone()
        dist.all_reduce(mine, group=cp_group)
        torch.testing.assert_close(mine / 2, want.detach(), rtol=1e-5, atol=1e-5)
        for o in opts:
            o.step()
            o.zero_grad()
    assert seen[0] == ("DTensor" if qkv == "dtensor" else "Tensor")


@multi_rank(world_size=4, timeout=180)
def test_cp4_every_step_and_gradients():
    import torch
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (4,))
    for method in ("ring", "allgather"):
        assert check_steps(mesh, method, "headtail", True) == 8
    for method, async_ in (("ring", True), ("alltoall", False)):
        for causal in (False, True):
            for name, got, want in cp_attention_vs_one_process(mesh, method, async_, causal, 4, None, "headtail",
                                                               torch.float32):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{method} {n}: {m}")
