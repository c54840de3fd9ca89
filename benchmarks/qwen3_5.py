# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: Qwen3.5's Gated DeltaNet on the CPU.

1. The chunked delta rule, forward + backward, ours (``hyper_parallel.models.qwen3_5.gated_delta``: one
   triangular solve, per-chunk affine ``(M, B)`` terms batched over all chunks, a custom-backward state scan)
   vs transformers' ``torch_chunk_gated_delta_rule`` (its pure-torch path) on the same inputs, interleaved
   round by round; shapes of a Qwen3.5-0.8B layer (16 key / 16 value heads of 128) and of the 35B-A3B
   (16 / 32), batch 1, ``--seq`` tokens.
2. One Gated DeltaNet layer (debug-width hidden 256) forward + backward on 2 gloo ranks with the sequence split
   (``LinearAttentionContextParallel``: conv halo + serial state hand-off) vs one process on the whole sequence
   (every rank runs it at the same time, one thread each).

    python benchmarks/qwen3_5.py [--seq 1024] [--rounds 3]   # part 2 self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def _rule_inputs(seq, hk, hv, dim):
    import torch
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, seq, hk, dim, generator=gen).requires_grad_() for _ in range(2))
    v = torch.randn(1, seq, hv, dim, generator=gen).requires_grad_()
    g = (-torch.rand(1, seq, hv, generator=gen)).requires_grad_()
    beta = torch.rand(1, seq, hv, generator=gen).requires_grad_()
    return q, k, v, g, beta


def _interleaved_local(candidates, rounds: int):
    """Median seconds per call, candidates alternating round by round (one process: no barrier)."""
    import statistics
    for fn in candidates.values():
        fn()
    samples = {k: [] for k in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_rule(seq: int, rounds: int) -> None:
    """Part 1 (one process)."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule
    from hyper_parallel.models.qwen3_5.gated_delta import chunk_gated_delta_rule
    rows = []
    for label, hk, hv in (("0.8B layer (16/16 x 128)", 16, 16), ("35B-A3B layer (16/32 x 128)", 16, 32)):
        inputs = _rule_inputs(seq, hk, hv, 128)

        def run(fn, inputs=inputs):
            out, _ = fn(*inputs, chunk_size=64, use_qk_l2norm_in_kernel=True)
            out.sum().backward()

        times = _interleaved_local({"transformers": lambda run=run: run(torch_chunk_gated_delta_rule),
                                    "ours": lambda run=run: run(chunk_gated_delta_rule)}, rounds)
        rows.append([label, f"{times['transformers'] * 1e3:.0f} ms", f"{times['ours'] * 1e3:.0f} ms",
                     f"{times['transformers'] / times['ours']:.2f}x"])
    print(f"delta rule fwd+bwd, seq {seq}, fp32, threads {torch.get_num_threads()}")
    for row in [["shape", "transformers", "ours", "speed-up"], *rows]:
        print("  " + " | ".join(f"{c:<28}" if i == 0 else f"{c:>12}" for i, c in enumerate(row)))


def bench_cp(seq: int, rounds: int) -> None:
    """Part 2 (2 ranks)."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.cp import LinearAttentionContextParallel
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.models.qwen3_5.model import Qwen3_5GatedDeltaNet
    from hyper_parallel.tp import parallelize_module
    config = get_model_spec("qwen3_5").config("debug", hidden_size=256, linear_num_key_heads=4,
                                              linear_num_value_heads=8, linear_key_head_dim=64,
                                              linear_value_head_dim=64, chunk_size=64)
    torch.manual_seed(0)
    single = Qwen3_5GatedDeltaNet(config)
    cp_layer = copy.deepcopy(single)
    parallelize_module(cp_layer, hp.init_device_mesh("cpu", (2,), mesh_dim_names=("cp",)),
                       LinearAttentionContextParallel())
    x = torch.randn(1, seq, config.hidden_size)
    rank, half = dist.get_rank(), seq // 2
    mine = x[:, rank * half:(rank + 1) * half].clone()

    def run(layer, inp):
        leaf = inp.clone().requires_grad_()
        layer(leaf).sum().backward()

    times = time_interleaved({"one process": lambda: run(single, x), "cp=2": lambda: run(cp_layer, mine)},
                             iters=1, warmup=1, rounds=rounds)
    if rank == 0:
        print_table(f"Gated DeltaNet layer fwd+bwd, seq {seq}, hidden 256, 8 value heads x 64, 2 ranks", [
            ["one process (whole sequence)", f"{times['one process'] * 1e3:.0f} ms", "1.00x"],
            ["cp=2 (state passing)", f"{times['cp=2'] * 1e3:.0f} ms",
             f"{times['one process'] / times['cp=2']:.2f}x"]], ["candidate", "time", "speed-up"])


def main() -> None:
    """Parse the arguments and run the parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("rule", "cp", "all"), default="all")
    args = parser.parse_args()
    if args.part in ("rule", "all") and "RANK" not in os.environ:
        start = time.perf_counter()
        bench_rule(args.seq, args.rounds)
        print(f"(part 1 took {time.perf_counter() - start:.0f} s; load {os.getloadavg()[0]:.1f})")
    if args.part in ("cp", "all"):
        ensure_launched(2)
        import torch.distributed as dist
        dist.init_process_group("gloo")
        bench_cp(args.seq, args.rounds)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
