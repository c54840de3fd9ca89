# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: per-op dispatch time on DTensors, 2 gloo ranks, side by side in one run.

For add, mul, mm, sum(dim), view, softmax and linear on (8, 8) and (256, 256) fp32 inputs sharded
``Shard(0)`` (mm/linear: the weight replicated, so no communication happens in any of them):
hyper-parallel vs ``torch.distributed.tensor`` vs the plain local op, timed on cache hits and
interleaved round by round; plus the first-call (cache-miss) time of each op for hyper-parallel
(a fresh shape per call, so the rule runs every time). Prints times and ratios.

    python benchmarks/dispatch.py         # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def _ops(torch, functional):
    """name -> (fn(a, b, w), needs) where a, b are (n, n) and w the replicated weight."""
    return {
        "add": lambda a, b, w: a + b,
        "mul": lambda a, b, w: a * b,
        "mm": lambda a, b, w: torch.mm(a, w),
        "sum(dim=1)": lambda a, b, w: a.sum(dim=1),
        "view": lambda a, b, w: a.view(-1),
        "softmax": lambda a, b, w: torch.softmax(a, dim=1),
        "linear": lambda a, b, w: functional.linear(a, w),
    }


def _miss_time(hp, torch, mesh, fn, Shard, n, trials=20):  # pylint: disable=invalid-name,too-many-arguments
    """Median first-call time: each trial uses a new row count, so the plan cache misses."""
    samples = []
    for t in range(trials):
        rows = 2 * (n + t + 1)
        a = hp.distribute_tensor(torch.randn(rows, n), mesh, [Shard(0)], src_data_rank=None)
        b = hp.distribute_tensor(torch.randn(rows, n), mesh, [Shard(0)], src_data_rank=None)
        w = hp.distribute_tensor(torch.randn(n, n), mesh, src_data_rank=None)
        start = time.perf_counter()
        fn(a, b, w)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    """Run the comparison and print one table per size on rank 0."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh as t_mesh_init
    from torch.distributed.tensor import Replicate as TR, Shard as TS, distribute_tensor as t_dist

    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard

    torch.set_num_threads(1)
    hp.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    tmesh = t_mesh_init("cpu", (world,))
    ops = _ops(torch, F)
    iters = int(os.environ.get("BENCH_ITERS", "300"))
    summary = []
    for n in (8, 256):
        torch.manual_seed(0)
        a, b, w = torch.randn(2 * n, n), torch.randn(2 * n, n), torch.randn(n, n)
        ours = (hp.distribute_tensor(a, mesh, [Shard(0)]), hp.distribute_tensor(b, mesh, [Shard(0)]),
                hp.distribute_tensor(w, mesh, [Replicate()]))
        theirs = (t_dist(a, tmesh, [TS(0)]), t_dist(b, tmesh, [TS(0)]), t_dist(w, tmesh, [TR()]))
        plain = (ours[0].to_local(), ours[1].to_local(), w)
        rows = []
        for name, fn in ops.items():
            got, want = fn(*ours), fn(*theirs)
            torch.testing.assert_close(got.full_tensor(), want.full_tensor())
            cands = {"ours": lambda fn=fn, xs=ours: fn(*xs), "torch": lambda fn=fn, xs=theirs: fn(*xs),
                     "plain": lambda fn=fn, xs=plain: fn(*xs)}
            times = time_interleaved(cands, iters=iters // (4 if n == 256 else 1))
            miss = _miss_time(hp, torch, mesh, fn, Shard, n)
            ratio = times["ours"] / times["torch"]
            summary.append(ratio)
            rows.append((name, fmt_time(times["plain"]), fmt_time(times["ours"]), fmt_time(times["torch"]),
                         f"{ratio:.2f}x", f"{times['ours'] / times['plain']:.1f}x", fmt_time(miss)))
        print_table(f"dispatch on cache hits, ({2 * n}, {n}) fp32 Shard(0), {world} gloo ranks",
                    rows, ("op", "plain", "hyper_parallel", "torch DTensor", "ours/torch", "ours/plain",
                           "ours first call"))
    if dist.get_rank() == 0:
        geo = statistics.geometric_mean(summary)
        print(f"geometric mean ours/torch DTensor over {len(summary)} op x size cases: {geo:.2f}x")
    dist.barrier()
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
