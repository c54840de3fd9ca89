# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Validation: auto-parallel's memory and step-time estimates next to measured runs on this machine.

1. ``calibrate`` this machine (matmul rate, eager op cost, gloo all-reduce: the micro-benchmarks of
   ``hp-auto-parallel calibrate``, nothing fitted to the runs below) -> the ClusterSpec of every estimate;
2. memory: every configuration of :data:`CONFIGS` (the tiny Llama ``small`` and ``debug_moe`` flavors at
   world 1, 2 and 4: FSDP, HSDP, TP, CP, PP with two schedules, TP and FSDP inside pipeline stages, EP,
   recompute on/off; built through the model registry's ``parallelize_fn``/``pipelining_fn`` as ``hp-train``
   builds them) runs once on gloo ranks (one thread each) with the peak tracked memory of the busiest rank
   over the steady-state steps (``AllocationTracker(by_pointer=True)``);
3. step time: ``--rounds`` rounds, each running every configuration once (3 timed steps, the median), so
   the machine's load falls on all of them alike; a configuration's time is its fastest round (the least
   disturbed by other jobs on the shared machine); the load average of every round is printed;
4. the targets: every memory error within +-10 %, Spearman rho of estimated vs measured step times >= 0.8,
   the plan ``search`` picks for ``small`` at world 4 within 10 % of the best measured step time of the
   world-4 configurations tried (measured too if it is not among them), and the stages ``balance_stages``
   chooses from measured part costs within 10 % of each other when measured.

    python benchmarks/auto_parallel_validate.py                  # all of it (~6 minutes on an idle 2-core machine)
    python benchmarks/auto_parallel_validate.py --only 0,3 --rounds 1

The load average is printed at the start, per round and at the end: run it when ``uptime`` shows a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HYPER_PARALLEL_MAX_POOLS", "3")  # one warm pool per world size (1, 2, 4)

# pylint: disable=wrong-import-position
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
    ("small", P(cp=2), 8),
    ("small", P(pp=2, microbatches=4), 8),
    ("small", P(pp=2, microbatches=4, schedule="GPipe"), 8),
    ("debug_moe", P(dp_shard=2, ep=2), 8),
    ("small", P(dp_shard=4), 8),
    ("small", P(dp_replicate=2, dp_shard=2), 8),
    ("small", P(dp_shard=2, tp=2), 8),
    ("small", P(dp_shard=2, cp=2), 8),
    ("small", P(pp=2, dp_shard=2, microbatches=2), 8),
    ("small", P(pp=2, tp=2, microbatches=2), 8),
    ("small", P(tp=4), 8),
    ("small", P(pp=4, microbatches=4), 8),
    ("debug_moe", P(dp_shard=4, ep=4), 8),
]
SEQ = 64
TIMEOUT = 900


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


def _run(flavor, plan, batch, tracked_steps, timed_steps):
    from hyper_parallel.auto_parallel._torch.measure import measure_flavor
    from hyper_parallel.testing import run_on_ranks
    return run_on_ranks(measure_flavor, world_size=plan.world_size, args=(flavor, plan, TrainConfig(batch, SEQ)),
                        kwargs={"tracked_steps": tracked_steps, "timed_steps": timed_steps}, timeout=TIMEOUT,
                        collective_timeout=TIMEOUT)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _estimates(rows, cluster) -> None:
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    for r in rows:
        shape = model_shape(TINY_CONFIGS[r["flavor"]], name=r["flavor"])
        # gloo stages every all-gather's output in a buffer of its own (TrainConfig.comm_staging)
        r["mem_est"] = estimate_memory(shape, r["plan_obj"], TrainConfig(r["batch"], SEQ, comm_staging=True)).peak_bytes
        r["t_est"] = estimate_step_time(shape, r["plan_obj"], TrainConfig(r["batch"], SEQ),
                                        cluster.with_devices(r["world"])).step_s


def _measure_memory(rows) -> None:
    for r in rows:
        t0 = time.perf_counter()
        got = _run(r["flavor"], r["plan_obj"], r["batch"], tracked_steps=2, timed_steps=1)
        r["mem_meas"] = max(got["peak_bytes"])
        r["mem_err"] = 100 * (r["mem_est"] / r["mem_meas"] - 1)
        print(f"  memory [{r['i']:2d}] {r['flavor']:9s} {r['plan']:28s} w{r['world']}  "
              f"est {r['mem_est'] / 2**20:7.2f} MiB  meas {r['mem_meas'] / 2**20:7.2f} MiB ({r['mem_err']:+5.1f} %)  "
              f"[{time.perf_counter() - t0:.0f} s, load {_load()}]", flush=True)


def _measure_time(rows, rounds: int) -> None:
    for rnd in range(rounds):
        order = rows if rnd % 2 == 0 else rows[::-1]  # alternate the order: drifts in load fall on both ends
        t0, load0 = time.perf_counter(), _load()
        for r in order:
            r.setdefault("t_rounds", []).append(_run(r["flavor"], r["plan_obj"], r["batch"], 0, 3)["step_s"])
        print(f"  time round {rnd + 1}/{rounds}: {time.perf_counter() - t0:.0f} s, load {load0} -> {_load()}: "
              + " ".join(f"{r['t_rounds'][-1] * 1e3:.0f}" for r in rows) + " ms", flush=True)
    for r in rows:
        r["t_meas"] = min(r["t_rounds"])


def _new_row(i, flavor, plan, batch):
    return {"i": i, "flavor": flavor, "plan": plan.label(), "plan_obj": plan, "world": plan.world_size,
            "batch": batch}


def _print_table(rows) -> None:
    print("\n| # | model | plan | world | peak est MiB | peak meas MiB | error | step est ms | step meas ms "
          "(fastest of rounds) | rounds ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['i']} | {r['flavor']} | {r['plan']} | {r['world']} | {r['mem_est'] / 2**20:.2f} | "
              f"{r['mem_meas'] / 2**20:.2f} | {r['mem_err']:+.1f} % | {r['t_est'] * 1e3:.1f} | "
              f"{r['t_meas'] * 1e3:.1f} | {' / '.join(f'{t * 1e3:.0f}' for t in r['t_rounds'])} |")


def _print_targets(rows, best) -> None:
    worst = max(abs(r["mem_err"]) for r in rows)
    rho = _spearman([r["t_est"] for r in rows], [r["t_meas"] for r in rows]) if len(rows) > 2 else float("nan")
    print(f"\nmemory: within 10 %: {sum(abs(r['mem_err']) <= 10 for r in rows)}/{len(rows)}; "
          f"max |error| {worst:.1f} %, mean |error| {statistics.mean(abs(r['mem_err']) for r in rows):.1f} % "
          "(target: all within 10 %)")
    print(f"step time: Spearman rho {rho:.3f} over {len(rows)} configurations (target >= 0.8)")
    small4 = [r for r in rows if r["world"] == 4 and r["flavor"] == "small"]
    mine = [r for r in small4 if r["plan"] == best.plan.label()]
    if mine:
        fastest = min(small4, key=lambda r: r["t_meas"])
        print(f"search's pick at world 4 ({best.plan.label()}) measured {mine[0]['t_meas'] * 1e3:.1f} ms vs the best "
              f"measured {fastest['t_meas'] * 1e3:.1f} ms ({fastest['plan']}): "
              f"{100 * (mine[0]['t_meas'] / fastest['t_meas'] - 1):+.1f} % (target <= 10 %)")


def _balance_check(layers: int = 15, vocab: int = 8192, reps: int = 5):
    """``balance_stages`` on measured forward + backward times of the parts (embedding, each decoder layer,
    norm + head + loss) of a Llama with a heavy head; then the stages of its split and of the even split,
    measured in interleaved rounds (fastest of ``reps``)."""
    import torch
    from hyper_parallel.auto_parallel import balance_stages
    from hyper_parallel.auto_parallel.balance import stage_times
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=688, num_hidden_layers=layers,
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
            model.zero_grad(set_to_none=True)
        return run

    def fastest(fns):
        """Fastest of ``reps`` interleaved rounds of every function (one warm-up each)."""
        for fn in fns:
            fn()
        best = [float("inf")] * len(fns)
        for _ in range(reps):
            for j, fn in enumerate(fns):
                t0 = time.perf_counter()
                fn()
                best[j] = min(best[j], time.perf_counter() - t0)
        return best

    n_parts = cfg.num_hidden_layers + 2
    costs = fastest([part_fn(k, k + 1) for k in range(n_parts)])
    out = {}
    for stages in (2, 3):
        sizes = balance_stages(costs, stages)
        even = [1 + layers // stages] + [layers // stages] * (stages - 2) + [1 + layers // stages]
        fns = []
        for split in (sizes, even):
            bounds = [0]
            for s in split:
                bounds.append(bounds[-1] + s)
            fns += [part_fn(bounds[i], bounds[i + 1]) for i in range(stages)]
        measured = fastest(fns)
        out[stages] = {"sizes": sizes, "predicted": stage_times(costs, sizes), "measured": measured[:stages],
                       "even": even, "even_measured": measured[stages:]}
    return costs, out


def _print_balance() -> None:
    t0 = time.perf_counter()
    costs, bal = _balance_check()
    print(f"\nstage balancing (Llama hidden 256, 15 layers, vocab 8192, batch 4 x {SEQ}; load {_load()}): measured "
          f"part costs (ms, embedding / layers / head) {[round(c * 1e3, 1) for c in costs]}")
    for k, b in bal.items():
        spread = max(b["measured"]) / min(b["measured"]) - 1
        pred = max(b["predicted"]) / min(b["predicted"]) - 1
        even = max(b["even_measured"]) / min(b["even_measured"]) - 1
        print(f"  {k} stages: balanced split (parts per stage) {b['sizes']}: predicted (ms) "
              f"{[round(x * 1e3, 1) for x in b['predicted']]} (spread {100 * pred:.1f} %), measured "
              f"{[round(x * 1e3, 1) for x in b['measured']]}: spread {100 * spread:.1f} % (target <= 10 %); "
              f"even split {b['even']} measured {[round(x * 1e3, 1) for x in b['even_measured']]}: spread "
              f"{100 * even:.1f} %")
    print(f"  [{time.perf_counter() - t0:.0f} s]")


def _search_pick(cluster):
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    shape4 = model_shape(TINY_CONFIGS["small"], name="small")
    t0 = time.perf_counter()
    result = search(shape4, cluster.with_devices(4, "24GiB"), 8, SEQ)
    # hyper_parallel.models' parallelize_fn shards over dp_replicate when nothing else is sharded (fully_shard on
    # its 1-D mesh), so pure DDP plans are not run as DDP: the pick is the best plan the registry runs as planned
    best = next(r for r in result if not (r.plan.dp_replicate > 1 and r.plan.dp_shard * r.plan.cp == 1))
    print(f"\nsearch picks for small at world 4: {best.plan.label()} (est {best.time.step_s * 1e3:.1f} ms, rank "
          f"{best.rank}; plans above it are pure DDP; {result.evaluated} plans evaluated in "
          f"{time.perf_counter() - t0:.2f} s)")
    return best


def main() -> None:
    """Run the validation and print the table and the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated indices of CONFIGS")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved step-time rounds (default 3)")
    ap.add_argument("--skip-balance", action="store_true")
    args = ap.parse_args()
    from hyper_parallel.auto_parallel._torch.calibrate import calibrate
    from hyper_parallel.testing import shutdown_pools
    start = time.perf_counter()
    print(f"load average at start: {_load()} ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})", flush=True)
    cluster = calibrate(2)
    print(f"calibrated: {cluster.peak_flops / 1e9:.2f} GFLOP/s per rank, {cluster.op_overhead * 1e6:.1f} us/op, "
          f"gloo {cluster.intra_node_bw / 1e6:.0f} MB/s, {cluster.latency * 1e6:.0f} us per hop, "
          f"{cluster.host_cores} cores [load {_load()}]", flush=True)
    picked = [int(x) for x in args.only.split(",") if x] or list(range(len(CONFIGS)))
    rows = [_new_row(i, *CONFIGS[i]) for i in picked]
    best = _search_pick(cluster)
    if not any(r["plan"] == best.plan.label() and r["world"] == 4 and r["flavor"] == "small" for r in rows):
        rows.append(_new_row(len(CONFIGS), "small", best.plan, 8))
    rows.sort(key=lambda r: (r["world"], r["i"]))  # one warm pool per world size at a time
    _estimates(rows, cluster)
    try:
        print("memory (one run each):", flush=True)
        _measure_memory(rows)
        print(f"step time ({args.rounds} interleaved rounds):", flush=True)
        _measure_time(rows, args.rounds)
    finally:
        shutdown_pools()
    rows.sort(key=lambda r: r["i"])
    _print_table(rows)
    _print_targets(rows, best)
    if not args.skip_balance:
        _print_balance()
    print(f"\nload average at end: {_load()}; total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
