# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what ``reshard_after_forward`` frees on MindSpore (2 CPU ranks, mccl).

Model: ``L`` units of ``Dense(H, H)`` (each its own ``fully_shard`` unit) under a root ``Dense(H, H)``,
batch 4, so the gathered weights dominate what the tape keeps (activations are 4 x H floats a layer).
Modes, each in a fresh launch (MindSpore's CPU memory pool keeps freed blocks, so a process measures one
mode only), rounds interleaved:

* ``keep``: ``reshard_after_forward=False`` (the tape keeps every gathered weight until backward);
* ``reshard``: ``reshard_after_forward=True`` (gathered weights leave the tape through
  ``mindspore.saved_tensors_hooks``; backward all-gathers each unit again);
* ``recompute``: ``reshard_after_forward=False`` with every unit wrapped by
  ``activation.checkpoint_wrapper`` (MindSpore recompute; the recomputation gathers again).

Measured per rank: resident memory (``/proc/self/statm``) after the forward, inside the differentiated
function (after ``mindspore.runtime.synchronize()`` and ``gc.collect()``), minus the resident memory just
before the step; and the step time (forward + backward) of a second step. The expected difference between
``keep`` and ``reshard`` is the unsharded weights of the ``L`` resharding units, ``L * H * H * 4`` bytes.

    python benchmarks/mindspore_fsdp_memory.py [--layers 8] [--hidden 1024] [--rounds 1]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

_ENV = "HP_BENCH_FSDP_MODE"


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def run() -> dict:
    """One rank of one mode (the mode, layers and width come from the environment)."""
    import numpy as np
    import mindspore as ms
    from mindspore import mint, nn
    import hyper_parallel as hp
    from hyper_parallel.activation import checkpoint_wrapper
    mode, layers, hidden = os.environ[_ENV].split(":")
    layers, hidden = int(layers), int(hidden)
    mesh = hp.init_device_mesh("cpu", (2,), platform="mindspore")
    ms.set_seed(0)

    class Net(nn.Cell):
        """A stack of square Dense layers under a root Dense."""

        def __init__(self):
            super().__init__()
            self.blocks = nn.CellList([nn.Dense(hidden, hidden) for _ in range(layers)])
            self.head = nn.Dense(hidden, hidden)

        def construct(self, x):
            """The blocks with tanh, then the root layer."""
            for b in self.blocks:
                x = mint.tanh(b(x))
            return self.head(x)

    net = Net()
    for b in net.blocks:
        hp.fully_shard(b, mesh=mesh, reshard_after_forward=mode == "reshard")
        if mode == "recompute":
            checkpoint_wrapper(b)
    hp.fully_shard(net, mesh=mesh)
    x = ms.Tensor(np.random.default_rng(mesh.get_coordinate()[0]).standard_normal((4, hidden)).astype(np.float32))
    seen = {}

    def loss_fn(inp):
        out = (net(inp) ** 2).mean()
        ms.runtime.synchronize()
        gc.collect()
        seen["after_forward"] = _rss_mib()
        return out

    grad_fn = ms.value_and_grad(loss_fn, None, net.trainable_params())
    deltas, times = [], []
    for _ in range(2):
        gc.collect()
        before = _rss_mib()
        t0 = time.perf_counter()
        loss, grads = grad_fn(x)
        float(loss.asnumpy())
        _ = [g.asnumpy() for g in grads]
        times.append(time.perf_counter() - t0)
        deltas.append(seen["after_forward"] - before)
    return {"mode": mode, "delta_mib": deltas[0], "step_s": times[1], "stats": net.fsdp_stats()}


def main(argv=None) -> None:
    """Launch each mode on 2 MindSpore ranks and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from hyper_parallel.testing.mindspore_launch import launch
    rows = {m: [] for m in ("keep", "reshard", "recompute")}
    for _ in range(args.rounds):
        for mode in rows:
            os.environ[_ENV] = f"{mode}:{args.layers}:{args.hidden}"
            res = launch("benchmarks.mindspore_fsdp_memory:run", world_size=2, timeout=600)
            rows[mode].append(res)
    expected = args.layers * args.hidden * args.hidden * 4 / 2 ** 20
    print(f"MindSpore fully_shard memory after forward, {args.layers} x Dense({args.hidden}) units, 2 ranks, "
          f"load {os.getloadavg()[0]:.1f}; unsharded weights of the resharding units: {expected:.1f} MiB")
    print(f"{'mode':10s} {'RSS after forward (MiB, rank 0 / 1)':38s} {'step s (rank 0)':16s} stats (rank 0)")
    for mode, runs in rows.items():
        for res in runs:
            d = " / ".join(f"{r['delta_mib']:7.1f}" for r in res)
            print(f"{mode:10s} {d:38s} {res[0]['step_s']:<16.3f} {json.dumps(res[0]['stats'])}")
    keep = min(r["delta_mib"] for res in rows["keep"] for r in res)
    resh = max(r["delta_mib"] for res in rows["reshard"] for r in res)
    print(f"freed by reshard_after_forward=True: {keep - resh:.1f} MiB (keep - reshard, worst rank; expected "
          f"~{expected:.1f} MiB)")


if __name__ == "__main__":
    main()
