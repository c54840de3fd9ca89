# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Demo section: pipeline parallelism — the 1F1B and ZBV timelines as text, then the tiny Llama trained
with a 1F1B pipeline on the 2 ranks next to the same training on one process."""
from __future__ import annotations

import copy


def pipeline_section() -> bool:
    """Print two schedule timelines and a PP-vs-one-process loss table; True when the losses match."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM, pipeline_llama
    from hyper_parallel.pipeline import explain_schedule
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print("== pipeline: schedules as data (simulated with F = I = W = 1) ==")
        print(explain_schedule("1F1B", world, 4))
        print(explain_schedule("ZBVZeroBubble", world, 4))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4))
    ref = copy.deepcopy(model)
    sched, parts = pipeline_llama(model, schedule="1F1B", n_microbatches=4)
    opt = torch.optim.SGD([p for part in parts for p in part.parameters()], lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    rows, ok = [], True
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        ids, labels = torch.randint(0, 256, (8, 16), generator=g), torch.randint(0, 256, (8, 16), generator=g)
        losses = []
        sched.step(ids if rank == 0 else None, target=labels if rank == world - 1 else None, losses=losses)
        ref_loss = ref.loss(ref(ids), labels)
        ref_loss.backward()
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        pp_loss = torch.tensor([sum(losses).item() / 4 if losses else 0.0])
        dist.all_reduce(pp_loss)
        diff = abs(pp_loss.item() - ref_loss.item())
        ok = ok and diff < 1e-5
        rows.append((step, f"{pp_loss.item():.6f}", f"{ref_loss.item():.6f}", f"{diff:.1e}"))
    if rank == 0:
        print(f"== pipeline: tiny Llama, 1F1B on {world} ranks (4 microbatches) vs one process ==")
        print("step  pipeline loss  one-process loss  |diff|")
        for r in rows:
            print(f"{r[0]:<5} {r[1]:<14} {r[2]:<17} {r[3]}")
        print("pipeline training matches the single-process training" if ok else "pipeline MISMATCH")
    return ok
