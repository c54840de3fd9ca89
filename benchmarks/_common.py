# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the benchmarks: self-launch under torchrun, interleaved timing, ratio tables."""
from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Sequence

import torch
import torch.distributed as dist


def ensure_launched(nproc: int = 2) -> None:
    """Re-run this script under ``torchrun --standalone`` when not launched by it."""
    if "RANK" in os.environ:
        return
    from torch.distributed.run import main as torchrun_main
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(torchrun_main(["--standalone", f"--nproc_per_node={nproc}", sys.argv[0], *sys.argv[1:]]))


def time_interleaved(candidates: Dict[str, Callable[[], object]], iters: int, warmup: int = 5,
                     rounds: int = 5) -> Dict[str, float]:
    """Median seconds per call of each candidate; candidates alternate round by round so that
    machine noise hits all of them alike. Ranks synchronise before each timed block."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    samples: Dict[str, List[float]] = {k: [] for k in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[name].append((time.perf_counter() - start) / iters)
    # the slowest rank defines the time of a collective step
    out = {}
    for name, vals in samples.items():
        t = torch.tensor([statistics.median(vals)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[name] = t.item()
    return out


def print_table(title: str, rows: Sequence[Sequence[object]], header: Sequence[str]) -> None:
    """Fixed-width table on rank 0."""
    if dist.get_rank() != 0:
        return
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"== {title} ==")
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    sys.stdout.flush()


def fmt_time(seconds: float) -> str:
    """Human units: µs below 1 ms, ms otherwise."""
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"
