# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: context-parallel attention forward + backward on 2 gloo ranks vs one process.

Causal attention (head-tail load balancing), batch 1, ``--seq`` 8192, 8 heads of 64, fp32, on the CPU
flash kernel. Candidates, interleaved round by round (the slowest rank counts): ring, async ring,
all-gather KV, async all-gather, all-to-all (Ulysses), and one process computing the whole sequence
(every rank runs it at the same time, one thread each, like the CP ranks).

Printed per method:
* time, and the speed-up over one process;
* bytes each rank sent (counted at our transport call sites from the tensors sent) vs the formula of
  ``hyper_parallel.cp.cost`` (target: within 5 %);
* exposed communication: seconds a rank blocked on transfers per call; and for the rings, the
  fraction of the communication time hidden: ``1 - blocked / comm``, where ``comm`` is the ring's
  transfers timed alone (same sizes, both ranks ready) and ``blocked`` counts only the wait after
  the sending peer had posted its send (``wait_end - max(wait_start, peer posted)``, the ranks' stamps
  compared on the shared monotonic clock): a wait for a peer still computing is load skew, which an
  overlap cannot hide and which the rest of the exposed time shows (target >= 50 % for the async ring);
* peak memory per rank: peak of live tensors during one call (``torch.distributed._tools.MemTracker``:
  op outputs; kernel-internal scratch is not seen), q/k/v/grad-out excluded.

    python benchmarks/cp.py [--seq 8192] [--rounds 2]      # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position

METHODS = [("ring", False), ("ring", True), ("allgather", False), ("allgather", True), ("alltoall", False)]


def _name(method: str, async_: bool) -> str:
    return f"{method}{'_async' if async_ else ''}"


def _make_inputs(args):
    import torch
    g = torch.Generator().manual_seed(0)
    shape = (1, args.heads, args.seq, args.head_dim)
    return [torch.randn(shape, generator=g) for _ in range(4)]  # q, k, v, grad_out


def _candidates(mesh, full, local, causal):
    """name -> callable running one forward + backward."""
    import torch.nn.functional as F
    from hyper_parallel.cp import context_parallel

    def single():
        q, k, v = (t.detach().requires_grad_(True) for t in full[:3])
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(full[3])

    def cp(method, async_):
        def run():
            q, k, v = (t.detach().requires_grad_(True) for t in local[:3])
            with context_parallel(mesh, method=method, async_op=async_):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(local[3])
        return run

    out = {"one process": single}
    for method, async_ in METHODS:
        out[_name(method, async_)] = cp(method, async_)
    return out


def _exchange_seconds(mesh, nbytes: int, repeats: int = 5) -> float:
    """Median seconds of one ring exchange of ``nbytes`` with both ranks ready (the max over ranks)."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.cp._torch.comm import RingExchange
    ex = RingExchange(mesh.get_group(0), "probe")
    buf = torch.zeros(nbytes // 4)
    samples = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        ex.exchange(buf, "probe", 99)
        samples.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(samples)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _blocked_on_transfer(stats, method: str, world: int):
    """(seconds blocked after the sender posted, seconds of load skew) over this method's P2P records,
    summed on this rank; the k-th receive of rank r comes from rank r-1's k-th send."""
    import torch.distributed as dist
    mine = [(r.posted, r.wait_start, r.wait_end) for r in stats.records if r.method == method and r.kind == "p2p"]
    every = [None] * world
    dist.all_gather_object(every, mine)
    prev = every[(dist.get_rank() - 1) % world]
    blocked = skew = 0.0
    for (posted, start, end), (peer_posted, _, _) in zip(mine, prev):
        ready = max(posted, peer_posted)
        blocked += max(0.0, end - max(start, ready))
        skew += max(0.0, min(end, ready) - start)
    return blocked, skew


def _peak_bytes(fn) -> int:
    """Peak live tensor bytes during ``fn()`` (MemTracker), the max over ranks."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    tracker = MemTracker()
    with tracker:
        fn()
    peak = sum(dev.get("Total", 0) for dev in tracker.get_tracker_snapshot("peak").values())
    t = torch.tensor([peak], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _check(mesh, full, local, causal) -> dict:
    """Max |difference| of each method's output and dq against one process (gathered)."""
    import torch.nn.functional as F
    from hyper_parallel.cp import context_parallel, context_parallel_unshard
    q, k, v = (t.detach().requires_grad_(True) for t in full[:3])
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref.backward(full[3])
    errs = {}
    for method, async_ in METHODS:
        lq, lk, lv = (t.detach().requires_grad_(True) for t in local[:3])
        with context_parallel(mesh, method=method, async_op=async_):
            out = F.scaled_dot_product_attention(lq, lk, lv, is_causal=causal)
        out.backward(local[3])
        got = context_parallel_unshard(mesh, [out.detach(), lq.grad], [2, 2])
        got_out, got_dq = got[0], got[1]
        errs[_name(method, async_)] = max((got_out - ref).abs().max().item(), (got_dq - q.grad).abs().max().item())
    return errs


def main() -> None:
    """Time, count, measure and print."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    import hyper_parallel.cp as hcp
    from hyper_parallel.cp.cost import method_bytes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-causal", action="store_true")
    args = parser.parse_args()
    causal = not args.no_causal
    hp.init_process_group("gloo")
    torch.set_num_threads(1)
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    full = _make_inputs(args)
    local = hcp.context_parallel_shard(mesh, full, [2, 2, 2, 2])
    load_before = os.getloadavg()

    errs = _check(mesh, full, local, causal)
    candidates = _candidates(mesh, full, local, causal)
    with hcp.comm_stats() as stats:
        times = time_interleaved(candidates, iters=1, warmup=0, rounds=args.rounds)
    single = times["one process"]

    # bytes: one more call per method, counted alone
    rows_bytes, ok_bytes = [], True
    for method, async_ in METHODS:
        name = _name(method, async_)
        with hcp.comm_stats() as one:
            candidates[name]()
        want = method_bytes(method, args.seq, world, args.heads, args.heads, args.head_dim, 4)
        for phase in ("fwd", "bwd"):
            got = one.total_bytes(phase=phase)
            ratio = got / want[phase] if want[phase] else float("nan")
            ok_bytes &= abs(ratio - 1) <= 0.05
            rows_bytes.append((name, phase, f"{got / 2**20:.2f} MiB", f"{want[phase] / 2**20:.2f} MiB", f"{ratio:.3f}"))

    # hidden communication of the async ring: its exposed wait vs the ring's transfers timed alone
    blk = 2 * (args.seq // world) * args.heads * args.head_dim * 4
    t_x = _exchange_seconds(mesh, blk)
    ring_comm = (3 * world - 2) * t_x  # (c-1) K/V forward, (c-1) K/V + c dK/dV backward
    per_call = {name: stats.exposed_seconds(method=name) / args.rounds for name in
                (_name(m, a) for m, a in METHODS)}
    blocked = {name: _blocked_on_transfer(stats, name, world) for name in ("ring", "ring_async")}
    hidden = {name: 1.0 - b / args.rounds / ring_comm for name, (b, _) in blocked.items()}

    peaks = {name: _peak_bytes(fn) for name, fn in candidates.items()}
    load_after = os.getloadavg()

    rows = []
    for name, seconds in times.items():
        rows.append((name, f"{seconds:.2f} s", f"{single / seconds:.2f}x", f"{per_call.get(name, 0.0) * 1e3:.1f} ms",
                     f"{peaks[name] / 2**20:.1f} MiB", f"{errs[name]:.1e}" if name in errs else "(reference)"))
    print_table(f"CP attention fwd+bwd, causal={causal}, seq {args.seq}, {args.heads} heads x {args.head_dim}, fp32, "
                f"{world} ranks x 1 thread, median of {args.rounds} interleaved rounds",
                rows, ("method", "time/call", "speed-up vs 1 process", "exposed comm/call", "peak memory/rank",
                       "max |err| out,dq"))
    print_table("bytes sent per rank per call vs formula (hyper_parallel.cp.cost)", rows_bytes,
                ("method", "phase", "measured", "formula", "ratio"))
    if dist.get_rank() == 0:
        print(f"ring transfers timed alone: {t_x * 1e3:.1f} ms per {blk / 2**20:.1f} MiB exchange, "
              f"{ring_comm * 1e3:.1f} ms per ring call (rank 0's view below)")
        for name in ("ring", "ring_async"):
            b, sk = blocked[name]
            print(f"  {name:<10} exposed {per_call[name] * 1e3:7.1f} ms/call = blocked on the transfer "
                  f"{b / args.rounds * 1e3:6.1f} ms + waiting for the peer to post (load skew) "
                  f"{sk / args.rounds * 1e3:6.1f} ms; communication hidden {hidden[name] * 100:4.0f} %")
        print(f"async ring hides {hidden['ring_async'] * 100:.0f} % of the ring's communication time "
              f"(target >= 50 %): {'met' if hidden['ring_async'] >= 0.5 else 'NOT met'}")
        print(f"bytes within 5 % of the formulas: {'met' if ok_bytes else 'NOT met'}")
        print(f"load average before/after: {load_before[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} cores")
    dist.barrier()
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
