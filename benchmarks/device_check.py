# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DTensor / op parity on the accelerator (run by benchmarks/device_check.sh under torchrun): on a mesh of the
platform's device type (``cuda`` with NCCL on a GPU machine), a set of ops on DTensors of several placements
against the same ops on the full tensors of the same device; redistributes between every pair of placements.
Prints one ``PARITY ok=<n> bad=<n>`` line on rank 0; exits 1 on any mismatch.

    torchrun --nproc_per_node 2 benchmarks/device_check.py
"""
import os
import sys

import torch
import torch.distributed as dist


def _cases(x, y):
    return {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "matmul": lambda a, b: a @ b.transpose(0, 1),
            "sum0": lambda a, _b: a.sum(0), "softmax": lambda a, _b: torch.softmax(a, -1),
            "gelu": lambda a, _b: torch.nn.functional.gelu(a), "mean": lambda a, _b: a.mean(),
            "layer_norm": lambda a, _b: torch.nn.functional.layer_norm(a, a.shape[-1:])}, (x, y)


def main() -> int:
    """Run the parity checks on this rank; 0 when every op and redistribute matched."""
    import hyper_parallel as hp
    from hyper_parallel.platform.torch.device import default_device_type, local_device
    kind = default_device_type()
    if kind == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    hp.init_process_group()
    world = dist.get_world_size()
    mesh = hp.init_device_mesh(kind, (world,))
    device = local_device(kind)
    torch.manual_seed(0)
    x, y = torch.randn(8 * world, 16, device=device), torch.randn(8 * world, 16, device=device)
    ops, args = _cases(x, y)
    placements = {"S0": [hp.Shard(0)], "S1": [hp.Shard(1)], "R": [hp.Replicate()]}
    ok = bad = 0
    failures = []
    for name, fn in ops.items():
        want = fn(*args)
        for pname, place in placements.items():
            got = fn(hp.distribute_tensor(x, mesh, place), hp.distribute_tensor(y, mesh, place))
            full = got.full_tensor() if hasattr(got, "full_tensor") else got
            if torch.allclose(full, want, rtol=1e-4, atol=1e-5):
                ok += 1
            else:
                bad += 1
                failures.append(f"{name}/{pname}")
    for src in placements.values():
        for dst in placements.values():
            d = hp.distribute_tensor(x, mesh, src).redistribute(mesh, dst)
            ok, bad = (ok + 1, bad) if torch.equal(d.full_tensor(), x) else (ok, bad + 1)
    if dist.get_rank() == 0:
        print(f"PARITY ok={ok} bad={bad} device={device} backend={dist.get_backend()} "
              f"{' '.join(failures)}".rstrip(), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
