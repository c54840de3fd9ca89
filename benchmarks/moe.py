# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: a MoE layer (8 experts, top-2, d=512, 4k tokens) with expert parallelism on 2 ranks.

One run, candidates interleaved round by round (forward + backward of ``sum(out * W)`` each):

1. step time: EP with the dropless all-to-all dispatcher (ours) vs the all-gather EP baseline
   (gather every token, run the local experts, reduce-scatter) vs the same layer on one process
   (the whole global batch on rank 0). Target: EP <= 0.7x the all-gather baseline.
2. bytes: what the platform's ``all_to_all_single`` actually handed to other ranks in one EP step
   (forward and backward), averaged over the ranks, vs the formula ``4 T k h b (ep - 1) / ep``
   (uniform routing; T tokens per rank). Target: within 5 %. (One rank alone deviates with the
   router's imbalance: with ep = 2 what one rank sends less the other sends more.)
3. ``GroupedExperts``: one ``torch._grouped_mm`` per projection vs the per-expert loop, forward +
   backward on the rows the router sent to the 8 experts. Target: grouped >= 2x faster.
4. overlap: EP with shared experts, token all-to-all asynchronous (shared experts computed while it
   is in flight) vs synchronous; then one async EP step under ``torch.profiler``: its chrome trace goes
   to ``BENCH_TRACE_DIR`` (default: a temporary directory) and the time during which an all-to-all is in
   flight (``hp.comm.all_to_all_single``: issue to completed wait) while the shared experts compute
   (``hp.moe.compute.shared_experts``) is measured from it (``hyper_parallel.devtools.trace_overlap``).

    python benchmarks/moe.py [--tokens 4096] [--dim 512] [--hidden 512]   # self-launches 2 ranks
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def _layer(args, **kw):
    import torch
    from hyper_parallel.moe import MoE, MoEConfig
    torch.manual_seed(0)
    base = dict(num_experts=8, top_k=2, dim=args.dim, hidden_dim=args.hidden, load_balance=None)
    base.update(kw)
    return MoE(MoEConfig(**base))


def _ep(model, mesh, **style):
    import hyper_parallel as hp
    from hyper_parallel.moe import ExpertParallel
    return hp.parallelize_module(copy.deepcopy(model), mesh, {"experts": ExpertParallel(**style)})


def _step(model, x, w):
    """Forward + backward of sum(out * W) (input gradient included); returns a callable for the timer."""
    def run():
        model.zero_grad(set_to_none=True)
        x.grad = None
        (model(x) * w).sum().backward()
    return run


def _idle():
    return None


def step_times(args, mesh, rank, world):
    """Section 1: EP (all-to-all) vs the all-gather baseline vs one process."""
    import torch
    ref = _layer(args)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.tokens, args.dim, generator=g, requires_grad=True)  # inside a model: dx is needed
    w = torch.randn(args.tokens, args.dim, generator=g)
    xs, ws = x.detach().chunk(world)[rank].requires_grad_(True), w.chunk(world)[rank]
    ep_a2a, ep_ag = _ep(ref, mesh), _ep(ref, mesh, dispatcher="all_gather")
    with torch.no_grad():  # the three agree before timing
        full = ref(x).chunk(world)[rank]
        for name, m in (("all-to-all", ep_a2a), ("all-gather", ep_ag)):
            err = (m(xs) - full).abs().max().item()
            if err > 1e-4:
                raise SystemExit(f"EP {name} disagrees with one process: max |diff| {err:.2e}")
    cands = {"EP all-to-all (ours)": _step(ep_a2a, xs, ws), "EP all-gather baseline": _step(ep_ag, xs, ws),
             "1 process (whole batch)": _step(ref, x, w) if rank == 0 else _idle}
    times = time_interleaved(cands, iters=args.iters, warmup=1, rounds=args.rounds)
    base = times["EP all-gather baseline"]
    rows = [(k, fmt_time(v), f"{v / base:.2f}x") for k, v in times.items()]
    print_table(f"1. MoE layer step (fwd+bwd), E=8 top-2 d={args.dim} h={args.hidden}, {args.tokens} tokens, "
                f"EP={world} (median of {args.rounds} interleaved rounds)", rows,
                ("candidate", "time", "vs all-gather"))
    return times, ep_a2a, xs, ws


def bytes_check(args, model, xs, ws, world):
    """Section 2: bytes the platform sent in one EP step (mean over the ranks) vs the formula."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.platform.torch.collectives import sent_bytes
    sent_bytes(reset=True)
    _step(model, xs, ws)()
    mine = sent_bytes(reset=True)
    per_rank = torch.tensor([mine], dtype=torch.int64)
    every = [torch.zeros_like(per_rank) for _ in range(world)]
    dist.all_gather(every, per_rank)
    every = [int(t) for t in every]
    local = model.experts.num_local_experts
    counts = local * (world - 1) * 8  # the count exchange: L int64 counts to every other rank, forward only
    t, k, h, b = xs.shape[0], 2, args.dim, xs.element_size()
    formula = 4 * t * k * h * b * (world - 1) / world
    measured = sum(every) / world - counts
    dev = measured / formula - 1
    rows = [("token all-to-all, mean over ranks", f"{measured:,.0f} B", f"{formula:,.0f} B", f"{dev * 100:+.2f} %")]
    rows += [(f"  rank {r}", f"{v - counts:,} B", "", f"{((v - counts) / formula - 1) * 100:+.2f} %")
             for r, v in enumerate(every)]
    rows.append(("count exchange (per rank)", f"{counts} B", f"E/ep*(ep-1)*8 = {counts} B", ""))
    print_table(f"2. bytes sent per step (fwd dispatch+combine, bwd both), T={t} tokens/rank k={k} h={h} b={b} "
                f"ep={world}; formula 4*T*k*h*b*(ep-1)/ep", rows, ("what", "measured", "formula", "deviation"))
    return dev


def grouped_vs_loop(args, rank):
    """Section 3: GroupedExperts grouped matmul vs the per-expert loop (rank 0 computes, rank 1 idles)."""
    import torch
    from hyper_parallel.moe import GroupedExperts
    rows, ratios = [], {}
    for label, e, dim, hidden, n_rows in ((f"E=8 d={args.dim} h={args.hidden}", 8, args.dim, args.hidden,
                                           2 * args.tokens),
                                          ("E=8 d=64 h=128", 8, 64, 128, 512),
                                          ("E=64 d=64 h=128", 64, 64, 128, 2048)):
        torch.manual_seed(0)
        grouped = GroupedExperts(e, dim, hidden, use_grouped_mm=True)
        loop = copy.deepcopy(grouped)
        loop.use_grouped_mm = False
        g = torch.Generator().manual_seed(2)
        counts = torch.bincount(torch.randint(0, e, (n_rows,), generator=g), minlength=e)
        x = torch.randn(n_rows, dim, generator=g, requires_grad=True)
        w = torch.randn(n_rows, dim, generator=g)

        def run(m, x=x, w=w, counts=counts):
            def one():
                m.zero_grad(set_to_none=True)
                (m(x, counts) * w).sum().backward()
            return one

        cands = {"grouped": run(grouped) if rank == 0 else _idle, "loop": run(loop) if rank == 0 else _idle}
        times = time_interleaved(cands, iters=args.iters, warmup=1, rounds=args.rounds)
        ratios[label] = times["loop"] / times["grouped"]
        rows.append((label, n_rows, fmt_time(times["grouped"]), fmt_time(times["loop"]), f"{ratios[label]:.2f}x"))
    print_table("3. GroupedExperts fwd+bwd: torch._grouped_mm vs per-expert loop (CPU, 1 thread)", rows,
                ("experts", "rows", "grouped", "loop", "loop/grouped"))
    return ratios


def overlap(args, mesh, rank, world):
    """Section 4: shared experts computed while the token all-to-all is in flight, vs synchronous:
    the whole EP step, and the forward exchange alone (exchange, shared experts, both overlapped)."""
    import torch
    from hyper_parallel.platform import get_platform
    ref = _layer(args, num_shared_experts=2)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(args.tokens, args.dim, generator=g).chunk(world)[rank].requires_grad_(True)
    w = torch.randn(args.tokens, args.dim, generator=g).chunk(world)[rank]
    cands = {"EP step, async all-to-all": _step(_ep(ref, mesh), x, w),
             "EP step, sync all-to-all": _step(_ep(ref, mesh, async_dispatch=False), x, w)}
    times = time_interleaved(cands, iters=args.iters, warmup=1, rounds=args.rounds)
    plat, group = get_platform("torch"), mesh.get_group(0)
    rows_out = x.shape[0] * 2 // world  # top-2 slots, half of them to each rank
    splits = [rows_out] * world
    tokens = torch.randn(rows_out * world, args.dim)
    shared = ref.shared_experts
    xd = x.detach()

    def exchange():
        plat.all_to_all_single_start(tokens, group, splits, splits).wait()

    def both():
        handle = plat.all_to_all_single_start(tokens, group, splits, splits)
        shared(xd)
        handle.wait()

    with torch.no_grad():
        parts = time_interleaved({"token all-to-all alone": exchange, "shared experts alone": lambda: shared(xd),
                                  "both, overlapped": both}, iters=args.iters * 5, warmup=2, rounds=args.rounds)
    traced = _trace_async_step(_ep(ref, mesh), x, w, rank)
    a, b, ab = parts["token all-to-all alone"], parts["shared experts alone"], parts["both, overlapped"]
    hidden = (a + b - ab) / min(a, b)
    ratio = times["EP step, async all-to-all"] / times["EP step, sync all-to-all"]
    rows = [(k, fmt_time(v)) for k, v in times.items()] + [("async / sync", f"{ratio:.3f}x")]
    rows += [(f"forward exchange ({rows_out * world} rows): {k}", fmt_time(v)) for k, v in parts.items()]
    rows.append(("share of the shorter one hidden by the overlap", f"{hidden * 100:.0f} %"))
    rows.append((f"trace, rank {rank}: all-to-all in flight (a) vs shared experts (b)", traced))
    print_table("4. overlap: EP with 2 shared experts, token all-to-all async vs sync", rows, ("variant", "time"))
    return ratio, hidden


def _trace_async_step(model, x, w, rank):
    """One async EP step under torch.profiler; the in-flight all-to-all vs shared-expert overlap from the trace."""
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    from hyper_parallel.devtools.trace_overlap import trace_overlap
    trace_dir = os.environ.get("BENCH_TRACE_DIR") or tempfile.mkdtemp(prefix="hp_moe_trace_")
    os.makedirs(trace_dir, exist_ok=True)
    step = _step(model, x, w)
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    path = os.path.join(trace_dir, f"moe_async_dispatch_rank{rank}.json")
    prof.export_chrome_trace(path)
    report = trace_overlap(path, r"hp\.comm\.all_to_all_single", r"hp\.moe\.compute\.shared_experts",
                           different_threads=False)
    return f"{report} ({path})"


def main() -> None:
    """Run the four sections and print the targets."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096, help="global tokens (split over the ranks)")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--iters", type=int, default=int(os.environ.get("BENCH_ITERS", "2")))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    hp.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    load0 = os.getloadavg()
    times, ep_model, xs, ws = step_times(args, mesh, rank, world)
    dev = bytes_check(args, ep_model, xs, ws, world)
    ratios = grouped_vs_loop(args, rank)
    ov, hidden = overlap(args, mesh, rank, world)
    load1 = os.getloadavg()
    if rank == 0:
        ep_ratio = times["EP all-to-all (ours)"] / times["EP all-gather baseline"]
        big = next(iter(ratios.values()))
        print("== targets ==")
        print(f"EP step / all-gather baseline: {ep_ratio:.2f}x (target <= 0.7x) "
              f"{'MET' if ep_ratio <= 0.7 else 'MISSED'}")
        print(f"all-to-all bytes vs formula: {dev * 100:+.2f} % (target within 5 %) "
              f"{'MET' if abs(dev) <= 0.05 else 'MISSED'}")
        print(f"grouped vs loop at 8 experts: {big:.2f}x faster (target >= 2x) {'MET' if big >= 2 else 'MISSED'}")
        print(f"async/sync EP step with shared experts: {ov:.3f}x; {hidden * 100:.0f} % of the shorter of "
              "(exchange, shared experts) hidden")
        print(f"load average (1/5/15 min) before {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, "
              f"after {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} on {os.cpu_count()} cores")
    dist.barrier()
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
