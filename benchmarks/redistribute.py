# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: S(0) -> R redistribute of a (1024, 1024) fp32 tensor on 2 gloo ranks.

Side by side in one run, interleaved: hyper-parallel's ``DTensor.redistribute``, PyTorch's
``torch.distributed.tensor`` redistribute, and the raw ``all_gather_into_tensor`` they both
wrap. Prints times and ratios (target: ours <= 1.05x the raw all-gather).

    python benchmarks/redistribute.py        # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def main() -> None:
    """Run the comparison and print the ratio table on rank 0."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate as TReplicate, Shard as TShard
    from torch.distributed.tensor import distribute_tensor as t_distribute
    from torch.distributed.device_mesh import init_device_mesh as t_init_mesh

    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard

    torch.set_num_threads(1)
    hp.init_process_group("gloo")
    world = dist.get_world_size()
    shape = (1024, 1024)
    torch.manual_seed(0)
    full = torch.randn(shape)

    ours_mesh = hp.init_device_mesh("cpu", (world,))
    ours = hp.distribute_tensor(full, ours_mesh, [Shard(0)])
    t_mesh = t_init_mesh("cpu", (world,))
    theirs = t_distribute(full, t_mesh, [TShard(0)])
    local = ours.to_local().contiguous()
    out = torch.empty(shape)

    def raw():
        dist.all_gather_into_tensor(out, local)

    def hyper():
        ours.redistribute(placements=[Replicate()])

    def torch_dtensor():
        theirs.redistribute(t_mesh, [TReplicate()])

    # the three must agree before we time them
    torch.testing.assert_close(ours.redistribute(placements=[Replicate()]).to_local(), full)
    torch.testing.assert_close(theirs.redistribute(t_mesh, [TReplicate()]).to_local(), full)

    times = time_interleaved({"raw all_gather": raw, "hyper_parallel": hyper, "torch DTensor": torch_dtensor},
                             iters=int(os.environ.get("BENCH_ITERS", "30")))
    base = times["raw all_gather"]
    rows = [(name, fmt_time(t), f"{t / base:.3f}x") for name, t in times.items()]
    rows.append(("hyper_parallel / torch DTensor", "", f"{times['hyper_parallel'] / times['torch DTensor']:.3f}x"))
    print_table(f"redistribute S(0)->R, {shape} fp32, {world} gloo ranks (median of interleaved rounds)",
                rows, ("what", "time", "vs raw all_gather"))
    dist.barrier()
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
