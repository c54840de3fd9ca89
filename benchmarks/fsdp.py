# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: one training step (forward, backward, AdamW step) under hyper-parallel ``fully_shard``,
torch FSDP2 (``torch.distributed.fsdp.fully_shard``) and DDP, side by side on 2 gloo ranks.

Models: the 4 x 1024 MLP (one unit per Linear plus the root) and the tiny Llama
(``hyper_parallel.models.llama3``, config ``small``: one unit per decoder layer plus the root holding
the embedding, the final norm and the LM head; next-token cross-entropy).
Step times are medians of interleaved rounds (the slowest rank counts).

Memory: per rank, the peak of *tracked allocations* during one step. Every variant is built and
stepped inside ``torch.profiler.profile(profile_memory=True)``; the CPU allocator then reports
every allocation and free (storage resizes included) with its running total of bytes, so the peak
is ``max(total_allocated)`` between two marker allocations that bracket the step, minus the total
when the session started (the counter is process-wide and outlives a session). It is compared with the formula
``(sharded params + grads + AdamW's two states) = 4 * P * 4 B / N`` plus the largest unit's
unsharded parameters (``U * 4 B``); a second column adds what one process needs beyond its
parameters, gradients and optimizer states for the same per-rank batch (activations, autograd and
optimizer temporaries), measured the same way on an undistributed copy.

    python benchmarks/fsdp.py        # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import copy
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position

_MARK = 7777  # bytes of the marker allocations that bracket the measured step


def _models():
    """(title, model, units_of, input, loss) for the MLP and the tiny Llama."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    mlp = nn.Sequential(*layers)
    llama = LlamaForCausalLM(TINY_CONFIGS["small"])
    vocab = TINY_CONFIGS["small"].vocab_size

    def square(out, _x):
        return out.square().mean()

    def next_token(logits, ids):
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))

    return [
        ("MLP 4x1024", mlp, lambda m: [x for x in m if isinstance(x, nn.Linear)], lambda: torch.randn(32, 1024),
         square),
        ("tiny Llama 'small' (4 layers, d=256)", llama, lambda m: list(m.model.layers),
         lambda: torch.randint(0, vocab, (4, 64)), next_token),
    ]


def _variants(base, units_of, world):
    """name -> builder returning (model, optimizer) for ours, torch FSDP2 and DDP."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh as t_init_mesh
    from torch.distributed.fsdp import fully_shard as t_fully_shard
    from torch.nn.parallel import DistributedDataParallel

    import hyper_parallel as hp

    ours_mesh = hp.init_device_mesh("cpu", (world,))
    t_mesh = t_init_mesh("cpu", (world,))

    def ours():
        m = copy.deepcopy(base)
        for u in units_of(m):
            hp.fully_shard(u, mesh=ours_mesh)
        hp.fully_shard(m, mesh=ours_mesh)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    def fsdp2():
        m = copy.deepcopy(base)
        for u in units_of(m):
            t_fully_shard(u, mesh=t_mesh)
        t_fully_shard(m, mesh=t_mesh)
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    def ddp():
        m = DistributedDataParallel(copy.deepcopy(base))
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    return {"hyper_parallel fully_shard": ours, "torch FSDP2": fsdp2, "DDP": ddp}


def _single(base):
    import torch
    m = copy.deepcopy(base)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-3)


def _stepper(model, opt, x, loss_fn):
    def step():
        loss = loss_fn(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def _peak_bytes(build, x, loss_fn) -> int:
    """Peak tracked bytes during one step (after a warm-up step), model built under the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, opt = build()
        step = _stepper(model, opt, x, loss_fn)
        step()
        mark = torch.empty(_MARK, dtype=torch.uint8)
        step()
        del mark
    nodes = list(_walk(prof.profiler.kineto_results.experimental_event_tree()))
    alloc_tag = torch._C._profiler._EventType.Allocation  # pylint: disable=protected-access
    allocs = sorted((n for n in nodes if n.tag == alloc_tag), key=lambda n: n.start_time_ns)
    # the allocator's running total is process-wide and survives profiler sessions: measure from
    # its value when this session started
    start = allocs[0].extra_fields.total_allocated - allocs[0].extra_fields.alloc_size if allocs else 0
    inside, peak = False, 0
    for n in allocs:
        f = n.extra_fields
        if abs(f.alloc_size) == _MARK:
            inside = f.alloc_size > 0
            continue
        if inside:
            peak = max(peak, f.total_allocated - start)
    return peak


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)


def _formula(base, units_of, world) -> tuple:
    total = sum(p.numel() for p in base.parameters())
    unit = max(sum(p.numel() for p in u.parameters()) for u in units_of(base))
    root_own = total - sum(sum(p.numel() for p in u.parameters()) for u in units_of(base))
    unit = max(unit, root_own)
    return 4 * total * 4 / world + unit * 4, total, unit


def _opt_step_times(builds, x, loss_fn, iters):
    """Median optimizer.step() time alone: ours (local shards), FSDP2 (DTensor dispatch), plain local tensors."""
    import torch
    out = {}
    made = {}
    for name in ("hyper_parallel fully_shard", "torch FSDP2"):
        model, opt = builds[name]()
        loss_fn(model(x), x).backward()
        made[name] = (model, opt)
    ours_model = made["hyper_parallel fully_shard"][0]
    plain = [p.to_local().detach().clone().requires_grad_() for p in ours_model.parameters()]
    for p in plain:
        p.grad = torch.randn_like(p)
    made["plain local tensors"] = (None, torch.optim.AdamW(plain, lr=1e-3))
    cands = {name: opt.step for name, (_, opt) in made.items()}
    out.update(time_interleaved(cands, iters=iters, warmup=2, rounds=5))
    return out


def main() -> None:
    """Run the comparison and print the tables on rank 0."""
    import torch
    import torch.distributed as dist

    import hyper_parallel as hp

    torch.set_num_threads(1)
    hp.init_process_group("gloo")
    world = dist.get_world_size()
    rank = dist.get_rank()
    iters = int(os.environ.get("BENCH_ITERS", "3"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "7"))
    for title, base, units_of, make_input, loss_fn in _models():
        torch.manual_seed(1 + rank)
        x = make_input()
        builds = _variants(base, units_of, world)
        steppers, losses = {}, {}
        for name, build in builds.items():
            model, opt = build()
            steppers[name] = _stepper(model, opt, x, loss_fn)
            losses[name] = [float(steppers[name]().detach()) for _ in range(2)]
        times = time_interleaved(steppers, iters=iters, warmup=1, rounds=rounds)
        peaks = {}
        for name, build in builds.items():
            t = torch.tensor([_peak_bytes(build, x, loss_fn)], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            peaks[name] = t.item()
        formula, total, unit = _formula(base, units_of, world)
        # what one process needs beyond parameters, gradients and AdamW states for the same per-rank
        # batch: activations, autograd temporaries, optimizer temporaries (no distribution at all)
        extra = _peak_bytes(functools.partial(_single, base), x, loss_fn) - 4 * total * 4
        _, fsdp2, ddp = (times[k] for k in builds)
        rows = [(name, fmt_time(t), f"{t / fsdp2:.3f}x", f"{t / ddp:.3f}x", f"{peaks[name] / 2**20:.1f} MiB",
                 f"{peaks[name] / formula:.2f}x", f"{peaks[name] / (formula + extra):.2f}x",
                 f"{losses[name][1]:.6f}") for name, t in times.items()]
        print_table(f"{title}: train step on {world} gloo ranks ({total / 1e6:.2f} M params, largest unit "
                    f"{unit / 1e6:.2f} M; memory formula {formula / 2**20:.1f} MiB/rank; activations and "
                    f"temporaries of one process {extra / 2**20:.1f} MiB)", rows,
                    ("variant", "step", "vs FSDP2", "vs DDP", "peak mem/rank", "vs formula",
                     "vs formula+act", "loss@step2"))
        if title.startswith("MLP"):
            opt_times = _opt_step_times(builds, x, loss_fn, iters=10)
            base_t = opt_times["plain local tensors"]
            print_table("optimizer.step() alone (AdamW, MLP shards)",
                        [(k, fmt_time(v), f"{v / base_t:.2f}x") for k, v in opt_times.items()],
                        ("variant", "time", "vs plain local tensors"))
        dist.barrier()
        time.sleep(0.1)
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
