# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the fused C++ CPU ops and the MC2 overlapped TP matmuls, one run, interleaved rounds.

1. Each fused op (forward + backward) vs its eager PyTorch reference vs ``torch.compile`` of the
   reference, at the shapes of the ``small`` Llama (hidden 256, MLP 688, 8 heads, batch 8 x seq 256;
   MoE 8 experts top-2; Sinkhorn on 4 x 4 mHC matrices per token). Rank 0, one thread.
2. MC2 on 2 ranks (d = 2048, seq = 2048): ``all_gather_matmul`` vs all-gather + matmul and
   ``matmul_reduce_scatter`` vs matmul + reduce-scatter, forward + backward; the collective alone is
   timed too, and the overlapped fraction = (unfused - MC2) / collective time.

    python benchmarks/kernels.py [--no-compile] [--seq 2048 --dim 2048]   # self-launches 2 ranks
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def _fwd_bwd(fn, make):
    """A closure running fn forward and backward on fresh leaves from make()."""
    def run():
        args = make()
        out = fn(*args)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
    return run


def _time_local(cands, iters, rounds=5, warmup=3):
    for fn in cands.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in cands}
    for _ in range(rounds):
        for k, fn in cands.items():
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[k].append((time.perf_counter() - t0) / iters)
    return {k: statistics.median(v) for k, v in samples.items()}


def _op_cases():
    import torch
    from hyper_parallel.kernels import apply_rotary_emb, moe_permute, moe_unpermute, rms_norm, sinkhorn, swiglu
    from hyper_parallel.kernels._torch import reference as ref
    g = torch.Generator().manual_seed(0)
    b, s, h, heads, ffn, e, k = 8, 256, 256, 8, 688, 8, 2

    def leaf(*shape):
        return torch.randn(*shape, generator=g).requires_grad_()

    x, w = leaf(b, s, h), leaf(h)
    q = leaf(b, s, heads, h // heads)
    theta = torch.randn(s, 1, h // heads // 2, generator=g)
    cos, sin = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)
    gate, up = leaf(b, s, ffn), leaf(b, s, ffn)
    tokens = leaf(b * s, h)
    idx = torch.randint(0, e, (b * s, k), generator=g)
    probs = torch.rand(b * s, k, generator=g).requires_grad_()
    mhc = leaf(b * s, 4, 4)
    return [
        ("rms_norm", lambda a, c: rms_norm(a, c, 1e-6), lambda a, c: ref.rms_norm_ref(a, c, 1e-6), (x, w)),
        ("rotary", apply_rotary_emb, ref.rotary_ref, (q, cos, sin)),
        ("swiglu", swiglu, ref.swiglu_ref, (gate, up)),
        ("moe permute+unpermute", lambda t, p: moe_unpermute(moe_permute(t, idx, e)[0], moe_permute(t, idx, e)[1], p),
         lambda t, p: ref.moe_unpermute_ref(*ref.moe_permute_ref(t, idx, e)[:2], p), (tokens, probs)),
        ("sinkhorn (20 it)", lambda m: sinkhorn(m, 20), lambda m: ref.sinkhorn_ref(m, 20), (mhc,)),
    ]


def bench_ops(compile_ref: bool, iters: int) -> None:
    """Section 1 (rank 0)."""
    import torch
    from hyper_parallel.kernels import build_info
    info = build_info()
    rows = []
    for name, ours, eager, args in _op_cases():
        def make(args=args):
            return [a.detach().requires_grad_(a.requires_grad) for a in args]
        cands = {"fused": _fwd_bwd(ours, make), "eager": _fwd_bwd(eager, make)}
        if compile_ref:
            cands["compile"] = _fwd_bwd(torch.compile(eager, dynamic=False), make)
        t = _time_local(cands, iters)
        row = [name, fmt_time(t["fused"]), fmt_time(t["eager"]), f"{t['eager'] / t['fused']:.2f}x"]
        if compile_ref:
            row += [fmt_time(t["compile"]), f"{t['compile'] / t['fused']:.2f}x"]
        rows.append(row)
    header = ["op (fwd+bwd)", "fused C++", "eager ref", "eager/fused"]
    if compile_ref:
        header += ["compile(ref)", "compile/fused"]
    print(f"C++ ops: mode={info['mode']} load/build {info['seconds']:.1f} s, {torch.get_num_threads()} thread(s)")
    print_table("fused CPU ops vs eager reference (target eager/fused >= 1.5x)", rows, header)


def bench_mc2(seq: int, dim: int, iters: int) -> None:
    """Section 2 (both ranks)."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.kernels import all_gather_matmul, matmul_reduce_scatter
    from hyper_parallel.kernels._torch.mc2 import (_all_gather_1, _reduce_scatter_1, unfused_all_gather_matmul,
                                                   unfused_matmul_reduce_scatter)
    p = dist.get_world_size()
    torch.manual_seed(dist.get_rank())
    x_col = torch.randn(seq // p, dim).requires_grad_()        # sequence shard (sequence parallel)
    w_col = torch.randn(dim, dim // p).requires_grad_()        # column shard
    x_row = torch.randn(seq, dim // p).requires_grad_()        # feature shard
    w_row = torch.randn(dim // p, dim).requires_grad_()        # row shard
    gather_buf = torch.empty(seq, dim)
    scatter_buf = torch.empty(seq // p, dim)
    full = torch.randn(seq, dim)

    def fb(fn, x, w):
        def run():
            fn(x, w).sum().backward()
        return run

    cands = {
        "AG+mm unfused": fb(unfused_all_gather_matmul, x_col, w_col),
        "AG+mm mc2": fb(all_gather_matmul, x_col, w_col),
        "mm+RS unfused": fb(unfused_matmul_reduce_scatter, x_row, w_row),
        "mm+RS mc2": fb(matmul_reduce_scatter, x_row, w_row),
        "all-gather alone": lambda: _all_gather_1(gather_buf, x_col.detach(), group=None),
        "reduce-scatter alone": lambda: _reduce_scatter_1(scatter_buf, full, group=None),
    }
    t = time_interleaved(cands, iters=iters, warmup=2, rounds=5)
    rows = []
    for kind, comm in (("AG+mm", "all-gather alone"), ("mm+RS", "reduce-scatter alone")):
        un, mc = t[f"{kind} unfused"], t[f"{kind} mc2"]
        comm_t = 2 * t[comm]  # forward + backward each run one collective of this size
        rows.append([kind, fmt_time(un), fmt_time(mc), f"{mc / un:.2f}", fmt_time(comm_t),
                     f"{max(0.0, un - mc) / comm_t:.0%}"])
    print_table(f"MC2 vs unfused, fwd+bwd, 2 ranks, seq {seq}, d {dim} (target mc2/unfused <= 0.85)", rows,
                ["op", "unfused", "mc2", "mc2/unfused", "collectives", "overlapped"])


def main() -> None:
    """Run both sections."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile of the references")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    ensure_launched(2)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        bench_ops(not args.no_compile, iters=max(3, args.iters * 3))
    dist.barrier()
    bench_mc2(args.seq, args.dim, args.iters)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
