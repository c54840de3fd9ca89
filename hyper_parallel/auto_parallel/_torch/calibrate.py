# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Measure this machine's speeds for a :class:`~hyper_parallel.auto_parallel.ClusterSpec` (CPU + gloo).

* compute: achieved FLOP/s of one rank (one thread) on training-shaped fp32 matmuls, forward and
  backward shapes, counted with ``torch.utils.flop_counter.FlopCounterMode``;
* dispatch: seconds per eager aten call of a training step (forward + backward of a one-layer Llama of
  hidden size 16, divided by its counted aten calls);
* links: gloo all-reduce on 2 ranks at a small size (latency) and a large one (bandwidth, ring formula).
"""
from __future__ import annotations

import os
import time
from typing import Dict

from hyper_parallel.auto_parallel.cluster import GIB, ClusterSpec

__all__ = ["measure_compute", "measure_op_overhead", "measure_allreduce", "calibrate", "HOST_RANKS"]

HOST_RANKS = 1024  # a calibrated CPU spec puts any number of ranks on this one host


def _best(fn, repeats: int) -> float:
    """Fastest seconds of ``fn`` over ``repeats`` runs: on a shared machine the fastest run is the one least
    disturbed by other jobs, the same statistic the validation takes of the measured steps (its fastest
    round), so both describe the machine when it is quiet."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_compute(threads: int = 1, repeats: int = 40) -> Dict[str, float]:
    """``{"flops": achieved FLOP/s, "op_overhead": seconds per op}`` of one rank with ``threads`` threads: a
    256-token MLP projection forward + backward (a few ms, so that some repeats run undisturbed on a shared
    machine)."""
    import torch  # pylint: disable=import-outside-toplevel
    from torch.utils.flop_counter import FlopCounterMode  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(threads)
    x = torch.randn(256, 256, requires_grad=True)
    w = torch.randn(688, 256, requires_grad=True)

    def step() -> None:
        y = torch.nn.functional.linear(x, w)
        y.sum().backward()
    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    step()
    seconds = _best(step, repeats)
    return {"flops": flops / seconds, "op_overhead": measure_op_overhead(repeats)}


def measure_op_overhead(repeats: int = 15) -> float:
    """Seconds per eager aten call of a training step: forward + backward of a one-layer Llama with hidden size
    16 (its FLOPs are negligible, so the time is dispatch, autograd and module-call overhead) divided by the
    aten calls it makes (counted with a ``TorchDispatchMode``)."""
    import torch  # pylint: disable=import-outside-toplevel
    from torch.utils._python_dispatch import TorchDispatchMode  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM  # pylint: disable=import-outside-toplevel

    class _Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            type(self).calls += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, 16, (1, 8))

    def step() -> None:
        model.loss(model(ids), ids).backward()
        model.zero_grad(set_to_none=True)
    step()
    with _Count():
        step()
    return _best(step, repeats) / max(_Count.calls, 1)


def measure_allreduce(small_bytes: int = 1024, large_bytes: int = 8 * 1024 * 1024, repeats: int = 15
                      ) -> Dict[str, float]:
    """On every rank of the process group: ``{"latency": s per hop, "bandwidth": bytes/s}`` from all-reduce."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    n = dist.get_world_size()
    out = {}
    for key, size in (("small", small_bytes), ("large", large_bytes)):
        buf = torch.ones(size // 4)
        dist.all_reduce(buf)

        def once(b=buf) -> None:
            dist.barrier()
            dist.all_reduce(b)
        out[key] = _best(once, repeats)
    latency = out["small"] / (2 * (n - 1))
    bandwidth = 2 * (n - 1) / n * large_bytes / max(out["large"] - out["small"], 1e-9)
    return {"latency": latency, "bandwidth": bandwidth}


def calibrate(world_size: int = 2) -> ClusterSpec:
    """A :class:`ClusterSpec` of this machine: CPU ranks (one thread each) on ``os.cpu_count()`` cores."""
    from hyper_parallel.testing import run_on_ranks  # pylint: disable=import-outside-toplevel
    compute = measure_compute()
    link = run_on_ranks(measure_allreduce, world_size=world_size, timeout=120)
    cores = os.cpu_count() or 1
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 16 * GIB
    # every rank runs on this one host (devices_per_node: no inter-node links); ranks beyond its cores share
    # them (host_cores); fully_shard reduces gradients by all-reduce on gloo
    return ClusterSpec(num_devices=world_size, devices_per_node=HOST_RANKS, device_memory=int(mem),
                       peak_flops=compute["flops"], intra_node_bw=link["bandwidth"], inter_node_bw=link["bandwidth"],
                       latency=link["latency"], mfu=1.0, op_overhead=compute["op_overhead"], comm_overlap=0.0,
                       host_cores=cores, fsdp_reduce="all_reduce", name=f"cpu-gloo-{cores}core (measured)")
