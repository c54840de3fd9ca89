# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Demo section: mixture of experts with expert parallelism on the 2 ranks — the expert load per step
of a skewed router before and after auxiliary-loss-free balancing (expert bias), then the tiny Llama
MoE variant (``debug_moe``) trained with EP + FSDP next to the same training on one process."""
from __future__ import annotations

import copy


def _balance_rows(world: int, rank: int):
    """A MoE layer whose router favours expert 0, trained 30 steps with and without the bias hook."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel.moe import ExpertParallel, MoE, MoEConfig, register_moe_load_balancing_hook
    from hyper_parallel.moe.balance import load_ratio
    mesh = hp.init_device_mesh("cpu", (world,))
    direction = torch.randn(8, generator=torch.Generator().manual_seed(7))
    runs = {}
    for balance in ("expert_bias", None):
        torch.manual_seed(0)
        moe = MoE(MoEConfig(num_experts=8, top_k=2, dim=8, hidden_dim=16, score_func="sigmoid",
                            load_balance=balance, bias_update_rate=1e-2))
        moe.router.reset_parameters(std=0.5)
        with torch.no_grad():
            moe.router.gate.weight[0] = 0.3 * direction  # every token leans to expert 0
        hp.parallelize_module(moe, mesh, {"experts": ExpertParallel()})
        opt = torch.optim.AdamW(moe.parameters(), lr=1e-3)
        register_moe_load_balancing_hook(moe, opt)
        loads = []
        for step in range(30):
            x = torch.randn(8, 8, 8, generator=torch.Generator().manual_seed(100 + 2 * step + rank)) + direction
            (moe(x) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
            loads.append(moe.global_tokens_per_expert)
        runs[balance] = (loads, moe.expert_bias.tolist())
    rows = []
    for step in (0, 5, 10, 15, 20, 25, 29):
        on, off = runs["expert_bias"][0][step], runs[None][0][step]
        rows.append((step, " ".join(f"{c:3d}" for c in off), f"{load_ratio(off):.2f}",
                     " ".join(f"{c:3d}" for c in on), f"{load_ratio(on):.2f}"))
    last = sum(load_ratio(v) for v in runs["expert_bias"][0][-10:]) / 10
    first = load_ratio(runs["expert_bias"][0][0])
    return rows, runs["expert_bias"][1], first, last


def _llama_rows(world: int, rank: int):
    """debug_moe Llama: EP over the 2 ranks + FSDP, 4 AdamW steps next to one process."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM, parallelize_llama_moe
    from hyper_parallel.moe import MoE, register_moe_load_balancing_hook
    from hyper_parallel.moe.balance import bias_update
    cfg = TINY_CONFIGS["debug_moe"]
    torch.manual_seed(0)
    ref = LlamaForCausalLM(cfg)
    for m in ref.modules():
        if isinstance(m, MoE):
            m.router.reset_parameters(std=0.5)
    model = parallelize_llama_moe(copy.deepcopy(ref), hp.init_device_mesh("cpu", (world,)), ep=world)
    opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, ref))
    register_moe_load_balancing_hook(model, opt)
    rows, ok = [], True
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        ids, labels = torch.randint(0, 256, (4, 16), generator=g), torch.randint(0, 256, (4, 16), generator=g)
        ref_loss = ref.loss(ref(ids), labels)
        ref_loss.backward()
        for m in ref.modules():  # the one-process run applies the same bias rule to its own counts
            if isinstance(m, MoE):
                with torch.no_grad():
                    m.expert_bias += torch.tensor(bias_update(m.tokens_per_expert.tolist(), m.config.bias_update_rate))
                    m.tokens_per_expert.zero_()
        loss = model.loss(model(ids.chunk(world)[rank]), labels.chunk(world)[rank])
        loss.backward()
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world
        diff = abs(mean - ref_loss.item())
        ok = ok and diff < 1e-4
        loads = model.model.layers[1].mlp.global_tokens_per_expert
        rows.append((step, f"{mean:.6f}", f"{ref_loss.item():.6f}", f"{diff:.1e}", " ".join(map(str, loads))))
    return rows, ok


def moe_section() -> bool:
    """Print the load table and the EP-vs-one-process loss table; True when the losses match and the
    balancing lowered the max/mean load."""
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, bias, first, last = _balance_rows(world, rank)
    llama, ok = _llama_rows(world, rank)
    balanced = last < 0.6 * first
    if rank == 0:
        print(f"\n== MoE: expert load per step (8 experts, top-2, EP={world}), router skewed to expert 0 ==")
        print("step  without balancing (tokens per expert)  max/mean  with expert bias (tokens per expert)  "
              "max/mean")
        for r in rows:
            print(f"{r[0]:<5} {r[1]:<38} {r[2]:<9} {r[3]:<37} {r[4]}")
        print(f"max/mean load with the expert bias: {first:.2f} at step 0 -> {last:.2f} (mean of the last 10 steps); "
              f"final bias {[round(b, 3) for b in bias]}")
        print(f"\n== MoE: tiny Llama debug_moe, EP={world} + FSDP (parallelize_llama_moe) vs one process ==")
        print("step  EP loss    1-process loss  |diff|   layer-1 tokens per expert")
        for r in llama:
            print(f"{r[0]:<5} {r[1]:<10} {r[2]:<15} {r[3]:<8} {r[4]}")
        print("EP training matches the single-process training" if ok else "EP MISMATCH")
    return ok and balanced
