# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: activation memory and step time of the tiny Llama under each activation mode.

One process (activation checkpointing and swap are per-process features), the tiny Llama ``small``
config (4 layers, hidden 256), batch 8 x 128 tokens, fp32, one CPU thread. A step is forward,
next-token loss and backward. Modes, ours next to torch's where torch has one:

* ``none`` — nothing;
* ``full`` — ``apply_activation_policy(mode="full")``, next to ``torch.utils.checkpoint`` (non-reentrant)
  around every layer;
* ``selective-op`` — the default op policy (keep matmul/attention outputs and collectives);
* ``every-2`` — full recompute of layers 1 and 3;
* ``swap-to-disk`` — every layer's saved activations to disk, prefetched one layer ahead in backward,
  next to torch's ``offload_wrapper`` (``save_on_cpu``: on a CPU-only machine it copies CPU tensors
  to CPU memory, so it frees nothing — shown for its cost);
* ``auto`` — the knapsack under a budget of 50 % of ``none``'s activation memory.

Memory (tracked CPU allocations, ``hyper_parallel.testing.memory.AllocationTracker``): *activation
memory* = bytes still allocated after forward + loss (swap: after its writes finished) minus before;
*peak* = the highest allocation during the step minus before. Time: interleaved rounds (every mode
runs once per round, in turn), median wall time and median process CPU time per step; the machine
is shared, so the load average is printed and CPU time is the steadier of the two.

    python benchmarks/activation.py [--rounds 7] [--batch 8] [--seq 128]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

import torch

import hyper_parallel.activation as act
from hyper_parallel.activation.memory import gpt_layer_bytes_korthikanti, llama_layer_saved_bytes
from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS
from hyper_parallel.testing.memory import AllocationTracker

MIB = 2 ** 20


def _torch_full(model):
    from torch.utils.checkpoint import checkpoint
    for layer in model.model.layers:
        layer.forward = lambda *a, _f=layer.forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)


def _torch_offload(model):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import offload_wrapper
    for i, layer in enumerate(model.model.layers):
        model.model.layers[i] = offload_wrapper(layer)


def build_variants(ref, ids, labels, swap_dir):
    """name -> (model, swap manager or None, plan or None)."""
    def ours(cfg, **kw):
        model = copy.deepcopy(ref)
        plan = act.apply_activation_policy(model, cfg, **kw)
        return model, plan.manager, plan

    def theirs(fn):
        model = copy.deepcopy(ref)
        fn(model)
        return model, None, None

    swap = {"target": "disk", "dir": swap_dir}
    held_none = activation_bytes(copy.deepcopy(ref), None, ids, labels)[0]
    variants = {
        "none": (copy.deepcopy(ref), None, None),
        "full": ours({"mode": "full"}),
        "torch checkpoint (full)": theirs(_torch_full),
        "selective-op": ours({"mode": "selective-op"}),
        "every-2": ours({"mode": "every-k", "every_k": 2}),
        "swap-to-disk": ours({"mode": "swap", "swap": swap}),
        "torch offload_wrapper": theirs(_torch_offload),
        "auto (budget 50%)": ours({"mode": "auto", "swap": swap, "auto": {"budget_bytes": int(0.5 * held_none)}},
                                  example_inputs=(ids,), loss_fn=lambda out: LlamaForCausalLM.loss(out, labels)),
    }
    return variants, held_none


def step(model, ids, labels) -> None:
    """Forward, loss, backward."""
    model.zero_grad(set_to_none=True)
    LlamaForCausalLM.loss(model(ids), labels).backward()


def activation_bytes(model, manager, ids, labels):
    """(bytes held after forward, peak bytes during the step), both relative to before the step."""
    step(model, ids, labels)  # warm-up: lazily created state is not an activation
    model.zero_grad(set_to_none=True)
    with AllocationTracker() as tracker:
        tracker.mark("before")
        loss = LlamaForCausalLM.loss(model(ids), labels)
        if manager is not None:
            manager.wait()
        tracker.mark("after_forward")
        loss.backward()
        del loss
        tracker.mark("after_backward")
    return tracker.live("after_forward") - tracker.live("before"), tracker.peak("before", "after_backward") - \
        tracker.live("before")


def time_interleaved(variants, ids, labels, rounds: int):
    """name -> (median wall seconds, median CPU seconds) per step."""
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    for model, _, _ in variants.values():
        step(model, ids, labels)
    for _ in range(rounds):
        for name, (model, _, _) in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            step(model, ids, labels)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in variants}


def main(argv=None) -> int:
    """Run every variant, print the table, the per-layer formula check and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = TINY_CONFIGS["small"]
    ref = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=g)
    labels = torch.roll(ids, -1, 1)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hp-bench-swap-") as swap_dir:
        variants, _ = build_variants(ref, ids, labels, swap_dir)
        mem = {name: activation_bytes(m, mgr, ids, labels) for name, (m, mgr, _) in variants.items()}
        times = time_interleaved(variants, ids, labels, args.rounds)
        auto_plan = variants["auto (budget 50%)"][2]
        leftover = os.listdir(swap_dir)
    base_held, base_peak = mem["none"]
    base_wall, base_cpu = times["none"]
    print(f"== activation modes: tiny Llama 'small', batch {args.batch} x {args.seq}, fp32, 1 thread; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 cores) ==")
    header = ("mode", "activation MiB", "vs none", "peak MiB", "vs none", "step wall", "vs none", "step CPU",
              "vs none")
    rows = []
    for name in variants:
        held, peak = mem[name]
        w, c = times[name]
        rows.append((name, f"{held / MIB:.2f}", f"{held / base_held:.2f}x", f"{peak / MIB:.2f}",
                     f"{peak / base_peak:.2f}x", f"{w * 1e3:.0f} ms", f"{w / base_wall:.2f}x", f"{c * 1e3:.0f} ms",
                     f"{c / base_cpu:.2f}x"))
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print(f"\nfull vs torch checkpoint: wall {times['full'][0] / times['torch checkpoint (full)'][0]:.2f}x, "
          f"CPU {times['full'][1] / times['torch checkpoint (full)'][1]:.2f}x")
    print(auto_plan.auto.report())
    layer = llama_layer_saved_bytes(args.batch, args.seq, cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim,
                                    cfg.intermediate_size, cfg.num_attention_heads, cfg.head_dim)
    from hyper_parallel.activation._torch.apply import _saved_bytes, find_layers
    model = copy.deepcopy(ref)
    own = _saved_bytes(model, find_layers(model, None), (ids,), None)
    measured = statistics.mean(own.values())
    gpt = gpt_layer_bytes_korthikanti(args.batch, args.seq, cfg.hidden_size, cfg.num_attention_heads)
    print(f"\nactivation bytes per layer: measured {measured / MIB:.3f} MiB, formula {layer / MIB:.3f} MiB "
          f"(ratio {measured / layer:.4f}); Korthikanti 16-bit GPT formula at this shape {gpt / MIB:.3f} MiB")
    print(f"swap files left after the run: {len(leftover)}")
    sel_t = times["selective-op"][1] / base_cpu
    sel_m = mem["selective-op"][0] / base_held
    swap_t = times["swap-to-disk"][1] / base_cpu
    print("\ntargets (CPU-time ratios):")
    print(f"  selective-op <= 1.15x time at <= 0.6x activation memory: {sel_t:.2f}x at {sel_m:.2f}x")
    print(f"  swap-to-disk <= 1.3x time: {swap_t:.2f}x (activation memory {mem['swap-to-disk'][0] / base_held:.2f}x)")
    print(f"  full not slower than torch's: {times['full'][1] / times['torch checkpoint (full)'][1]:.2f}x")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
