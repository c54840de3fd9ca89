# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checkpoint throughput on 2 ranks: ours vs torch's DCP (with torch's DTensor) vs the disk itself.

    python benchmarks/checkpoint.py [--mb 256] [--rounds 3] [--dir /tmp]   (launches itself with torchrun)

A ~256 MB float32 state dict (16 tensors, ``Shard(0)`` over the 2 ranks) is saved and loaded, rounds
interleaved so that machine noise hits every candidate alike:

* ``disk``: each rank writes its half (the same bytes) with plain ``write`` + ``fsync`` concurrently —
  the sequential write speed of this disk for this access pattern, measured in the same run;
* ``ours``: ``hyper_parallel.checkpoint.save/load`` (safetensors, CRC-32, fsync, atomic publication) of
  ``hyper_parallel`` DTensors;
* ``torch DCP``: ``torch.distributed.checkpoint.save/load`` (``FileSystemWriter``: ``torch.save`` per
  tensor, fsync) of torch's own DTensors with the same placements;
* ``async``: how long ``async_save`` blocks the training loop (staging into host memory) vs a sync save.

Targets (issue #19): save >= 0.8x the disk's write speed and not slower than torch DCP; async blocking
<= 10 % of the sync save. Loads read back right after the saves, mostly from the page cache.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402  # pylint: disable=wrong-import-position
import torch.distributed as dist  # noqa: E402  # pylint: disable=wrong-import-position

from _common import ensure_launched, print_table  # noqa: E402  # pylint: disable=wrong-import-position,import-error


def _state(mb: int, ours: bool, mesh, tmesh):
    """``mb`` MB of float32 in 16 tensors, Shard(0) over the mesh (ours or torch's DTensor)."""
    import hyper_parallel as hp
    from torch.distributed.tensor import Shard as TShard, distribute_tensor as tdistribute
    rows = mb * (1 << 20) // 4 // 16 // 1024
    g = torch.Generator().manual_seed(0)
    out = {}
    for i in range(16):
        full = torch.randn(rows, 1024, generator=g)
        out[f"layers.{i}.weight"] = (hp.distribute_tensor(full, mesh, [hp.Shard(0)], src_data_rank=None) if ours
                                     else tdistribute(full, tmesh, [TShard(0)], src_data_rank=None))
    return out


def _plain_write(path: str, buf: torch.Tensor) -> None:
    with open(path, "wb") as f:
        f.write(buf.numpy().data)
        f.flush()
        os.fsync(f.fileno())


def _timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - start


def _run_round(root: str, r: int, ours_sd, torch_sd, local_bytes: torch.Tensor, samples) -> None:
    import torch.distributed.checkpoint as dcp
    from hyper_parallel import checkpoint as ckpt
    rank = dist.get_rank()
    disk = os.path.join(root, f"disk{r}_{rank}.bin")
    samples["disk write"].append(_timed(lambda: _plain_write(disk, local_bytes)))
    samples["ours save"].append(_timed(lambda: ckpt.save(ours_sd, checkpoint_id=os.path.join(root, f"ours{r}"))))
    samples["torch DCP save"].append(_timed(lambda: dcp.save(torch_sd, checkpoint_id=os.path.join(root, f"dcp{r}"))))
    samples["ours load"].append(_timed(lambda: ckpt.load(ours_sd, checkpoint_id=os.path.join(root, f"ours{r}"))))
    samples["torch DCP load"].append(_timed(lambda: dcp.load(torch_sd, checkpoint_id=os.path.join(root, f"dcp{r}"))))
    start = time.perf_counter()
    fut = ckpt.async_save(ours_sd, checkpoint_id=os.path.join(root, f"async{r}"))
    blocked = time.perf_counter() - start
    fut.result()
    t = torch.tensor([blocked], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    samples["async save (blocking part)"].append(t.item())
    dist.barrier()
    if rank == 0:
        for name in os.listdir(root):
            p = os.path.join(root, name)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)  # pylint: disable=expression-not-assigned
    dist.barrier()


def main() -> int:
    """Run the benchmark and print the table (rank 0)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=256, help="size of the state dict (MB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    args = parser.parse_args()
    ensure_launched(2)
    import tempfile
    import hyper_parallel as hp
    from torch.distributed.device_mesh import init_device_mesh as torch_mesh
    hp.init_process_group("gloo")
    torch.set_num_threads(1)
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh, tmesh = hp.init_device_mesh("cpu", (world,)), torch_mesh("cpu", (world,))
    box = [tempfile.mkdtemp(prefix="hp_ckpt_bench_", dir=args.dir) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    root = box[0]
    ours_sd, torch_sd = _state(args.mb, True, mesh, tmesh), _state(args.mb, False, mesh, tmesh)
    total = sum(v.numel() * v.element_size() for v in ours_sd.values())
    local_bytes = torch.cat([v.to_local().reshape(-1) for v in ours_sd.values()])
    names = ["disk write", "ours save", "torch DCP save", "ours load", "torch DCP load", "async save (blocking part)"]
    samples = {k: [] for k in names}
    load_before = os.getloadavg()
    try:
        for r in range(args.rounds + 1):  # round 0 warms up (imports, process groups, page cache)
            _run_round(root, r, ours_sd, torch_sd, local_bytes, samples)
            if r == 0:
                for v in samples.values():
                    v.clear()
    finally:
        dist.barrier()
        if rank == 0:
            shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    gbs = {k: total / v / 1e9 for k, v in med.items()}
    rows = [(k, f"{med[k] * 1e3:.0f} ms", f"{gbs[k]:.2f}" if "async" not in k else "-") for k in names]
    print_table(f"checkpoint, {total / 1e6:.0f} MB state dict on {world} ranks, median of {args.rounds} rounds",
                rows, ("what", "time", "GB/s"))
    if rank == 0:
        print(f"ours save / disk write      {gbs['ours save'] / gbs['disk write']:.2f}x  (target >= 0.8)")
        print(f"ours save / torch DCP save  {gbs['ours save'] / gbs['torch DCP save']:.2f}x  (target >= 1.0)")
        print(f"ours load / torch DCP load  {gbs['ours load'] / gbs['torch DCP load']:.2f}x")
        print(f"async blocking / sync save  {med['async save (blocking part)'] / med['ours save'] * 100:.1f} %  "
              "(target <= 10 %)")
        print(f"load average before/after: {load_before[0]:.1f} / {os.getloadavg()[0]:.1f} "
              f"({os.cpu_count()} cores)")
    hp.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
