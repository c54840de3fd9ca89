# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Validation: auto-parallel's memory and step-time estimates next to measured runs on this machine.

1. ``calibrate`` this machine (matmul rate, eager op cost, gloo all-reduce) -> the ClusterSpec used below;
2. run every configuration of :data:`CONFIGS` (the tiny Llama ``small`` and ``debug_moe`` flavors at world
   1, 2 and 4: FSDP, TP, PP with two schedules, EP, combinations, recompute on/off) in fresh gloo processes
   (one thread per rank), measuring the peak tracked memory of the busiest rank in the steady-state steps
   (``AllocationTracker``: CPU allocator live bytes from just before the model is built) and the median step
   time of the slowest rank; print them next to the estimates with the error;
3. print the targets: every memory error within +-10 %, Spearman rho of estimated vs measured step times
   >= 0.8, the plan ``search`` picks for ``small`` at world 4 within 10 % of the best measured step time of
   the world-4 configurations tried (measured too if it is not among them), and the measured forward +
   backward times of the stages ``balance_stages`` chooses within 10 % of each other.

    python benchmarks/auto_parallel_validate.py            # all of it (~5 minutes on an idle 2-core machine)
    python benchmarks/auto_parallel_validate.py --only 0,3  # some configurations

The machine is shared: the load average is printed; step times vary 2-3x under load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from hyper_parallel.auto_parallel import ParallelPlan, TrainConfig, estimate_memory, estimate_step_time, search
from hyper_parallel.auto_parallel.shape import model_shape

P = ParallelPlan
# (flavor, plan, global batch); sequence length 64 everywhere
CONFIGS = [
    ("small", P(), 4),
    ("small", P(activation="full"), 4),
    ("small", P(dp_shard=2), 8),
    ("small", P(dp_shard=2, activation="full"), 8),
    ("small", P(tp=2), 8),
    ("small", P(pp=2, microbatches=4), 8),
    ("small", P(pp=2, microbatches=4, schedule="GPipe"), 8),
    ("debug_moe", P(dp_shard=2, ep=2), 8),
    ("small", P(dp_shard=4), 8),
    ("small", P(dp_shard=2, tp=2), 8),
    ("small", P(pp=2, dp_shard=2, microbatches=2), 8),
    ("small", P(tp=4), 8),
    ("small", P(pp=4, microbatches=4), 8),
    ("debug_moe", P(dp_shard=4, ep=4), 8),
]
SEQ = 64


def _spearman(a, b) -> float:
    def ranks(xs):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        r = [0.0] * len(xs)
        for pos, i in enumerate(order):
            r[i] = float(pos)
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def _measure(flavor, plan, batch):
    from hyper_parallel.auto_parallel._torch.measure import measure_flavor
    from hyper_parallel.testing import run_on_ranks, shutdown_pools
    try:
        return run_on_ranks(measure_flavor, world_size=plan.world_size, args=(flavor, plan, TrainConfig(batch, SEQ)),
                            timeout=600)
    finally:
        shutdown_pools()


def _balance_check():
    """balance_stages on measured per-part costs of a Llama with a heavy head; the stages' measured times."""
    import torch
    from hyper_parallel.auto_parallel import balance_stages
    from hyper_parallel.auto_parallel.balance import stage_times
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(1)
    cfg = LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                      num_attention_heads=8, num_key_value_heads=4)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (4, SEQ))
    labels = torch.randint(0, cfg.vocab_size, (4, SEQ))
    h0 = model.model.embed_tokens(ids).detach()
    cos, sin = model.model.rotary(torch.arange(SEQ))

    def part_fn(lo, hi):
        """forward+backward of parts lo..hi-1 (0 = embedding, 1..L = layers, L+1 = norm + head + loss)."""
        def run():
            x = ids if lo == 0 else h0.clone().requires_grad_(True)
            for k in range(lo, hi):
                if k == 0:
                    x = model.model.embed_tokens(x)
                elif k <= cfg.num_hidden_layers:
                    x = model.model.layers[k - 1](x, cos, sin)
                else:
                    x = model.loss(model.lm_head(model.model.norm(x)), labels)
            (x if x.dim() == 0 else x.sum()).backward()
        return run

    def timed(fn, reps=7):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)
    n_parts = cfg.num_hidden_layers + 2
    costs = [timed(part_fn(k, k + 1)) for k in range(n_parts)]
    out = {}
    for stages in (2, 3):
        sizes = balance_stages(costs, stages)
        bounds = [0]
        for s in sizes:
            bounds.append(bounds[-1] + s)
        measured = [timed(part_fn(bounds[i], bounds[i + 1])) for i in range(stages)]
        even = [1 + cfg.num_hidden_layers // stages] + [cfg.num_hidden_layers // stages] * (stages - 2) + \
            [1 + cfg.num_hidden_layers // stages]
        even_b = [0]
        for s in even:
            even_b.append(even_b[-1] + s)
        even_meas = [timed(part_fn(even_b[i], even_b[i + 1])) for i in range(stages)]
        out[stages] = dict(sizes=sizes, predicted=stage_times(costs, sizes), measured=measured, even=even,
                           even_measured=even_meas)
    return costs, out


def _row(i, flavor, plan, batch, cluster):
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    shape = model_shape(TINY_CONFIGS[flavor], name=flavor)
    train = TrainConfig(batch, SEQ)
    mem = estimate_memory(shape, plan, train)
    est = estimate_step_time(shape, plan, train, cluster.with_devices(plan.world_size))
    t0 = time.perf_counter()
    got = _measure(flavor, plan, batch)
    meas_mem = max(got["peak_bytes"])
    row = dict(i=i, flavor=flavor, plan=plan.label(), world=plan.world_size, mem_est=mem.peak_bytes,
               mem_meas=meas_mem, mem_err=100 * (mem.peak_bytes / meas_mem - 1), t_est=est.step_s,
               t_meas=got["step_s"], per_rank=got["peak_bytes"], wall=time.perf_counter() - t0)
    print(f"[{i:2d}] {flavor:9s} {plan.label():28s} w{plan.world_size}  mem est {mem.peak_bytes / 2**20:7.2f} MiB "
          f"meas {meas_mem / 2**20:7.2f} MiB ({row['mem_err']:+5.1f} %)  step est {est.step_s * 1e3:7.1f} ms "
          f"meas {got['step_s'] * 1e3:7.1f} ms  [{row['wall']:.0f} s]", flush=True)
    return row


def _print_table(rows) -> None:
    print("\n| # | model | plan | world | peak est MiB | peak meas MiB | error | step est ms | step meas ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['i']} | {r['flavor']} | {r['plan']} | {r['world']} | {r['mem_est'] / 2**20:.2f} | "
              f"{r['mem_meas'] / 2**20:.2f} | {r['mem_err']:+.1f} % | {r['t_est'] * 1e3:.1f} | "
              f"{r['t_meas'] * 1e3:.1f} |")


def _print_targets(rows, best) -> None:
    worst = max(abs(r["mem_err"]) for r in rows)
    rho = _spearman([r["t_est"] for r in rows], [r["t_meas"] for r in rows]) if len(rows) > 2 else float("nan")
    print(f"\nmemory: max |error| {worst:.1f} % (target <= 10 %), mean |error| "
          f"{statistics.mean(abs(r['mem_err']) for r in rows):.1f} %; within 10 %: "
          f"{sum(abs(r['mem_err']) <= 10 for r in rows)}/{len(rows)}")
    print(f"step time: Spearman rho {rho:.3f} (target >= 0.8)")
    small4 = [r for r in rows if r["world"] == 4 and r["flavor"] == "small"]
    mine = [r for r in small4 if r["plan"] == best.plan.label()]
    if mine:
        fastest = min(r["t_meas"] for r in small4)
        print(f"search's pick at world 4 measured {mine[0]['t_meas'] * 1e3:.1f} ms vs the best measured "
              f"{fastest * 1e3:.1f} ms: {100 * (mine[0]['t_meas'] / fastest - 1):+.1f} % (target <= 10 %)")


def _print_balance() -> None:
    costs, bal = _balance_check()
    print(f"\nstage balancing (vocab 8192, 6 layers): measured part costs (ms) {[round(c * 1e3, 2) for c in costs]}")
    for k, b in bal.items():
        spread = max(b["measured"]) / min(b["measured"]) - 1
        even = max(b["even_measured"]) / min(b["even_measured"]) - 1
        got = [round(x * 1e3, 2) for x in b["measured"]]
        print(f"  {k} stages: balanced split {b['sizes']} measured (ms) {got} "
              f"spread {100 * spread:.1f} % (target <= 10 %); even split {b['even']} spread {100 * even:.1f} %")


def main() -> None:
    """Run the validation and print the table and the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated indices of CONFIGS")
    ap.add_argument("--skip-balance", action="store_true")
    args = ap.parse_args()
    from hyper_parallel.auto_parallel._torch.calibrate import calibrate
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    print(f"load average at start: {os.getloadavg()}", flush=True)
    cluster = calibrate(2)
    print(f"calibrated: {cluster}", flush=True)
    picked = [int(x) for x in args.only.split(",") if x] or list(range(len(CONFIGS)))
    rows = [_row(i, *CONFIGS[i], cluster) for i in picked]
    # the measured runner applies TP to whole models or FSDP to pipeline parts, not TP to pipeline parts: the
    # search's pick among the layouts it runs = the faster of the best pipeline-free and the best TP-free plan
    shape4 = model_shape(TINY_CONFIGS["small"], name="small")
    best = min((search(shape4, cluster.with_devices(4, "24GiB"), 8, SEQ, {"dp_replicate": 1, "cp": 1, **c})[0]
                for c in ({"pp": 1}, {"tp": 1})), key=lambda r: r.time.step_s)
    print(f"\nsearch picks for small at world 4: {best.plan.label()} (est {best.time.step_s * 1e3:.1f} ms)")
    small4 = [r["plan"] for r in rows if r["world"] == 4 and r["flavor"] == "small"]
    if small4 and best.plan.label() not in small4:
        rows.append(_row(len(CONFIGS), "small", best.plan, 8, cluster))
    _print_table(rows)
    _print_targets(rows, best)
    if not args.skip_balance:
        _print_balance()
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
