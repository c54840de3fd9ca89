# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: hyper-parallel's pipeline runtime vs ``torch.distributed.pipelining`` on 2 gloo ranks.

Side by side in one run, rounds interleaved (ours, torch, ours, torch ...): every schedule both
libraries ship, on an 8-layer MLP (d=1024) and on the tiny Llama ("small": 4 layers, hidden 256).
Single-stage schedules put 1 stage on each rank, the interleaved and V schedules 2 (4 stages).
Prints the median step time of each, the ratio ours/torch (target <= 0.9), and — from our per-step
timings of the compute steps — each rank's measured idle fraction next to the schedule's value from
the simulator fed with the measured mean step costs (the closed-form bubble assumes the F/B/W costs
of the formula; the simulator applies the same schedule to the costs measured here) and next to the
closed form for GPipe/1F1B ((p-1)/(m+p-1)). The load average is printed with the results.

A second part, ``overlap_b_f``: PP with MoE (4 stages of ``x + MoE(tanh(lin(x)))``, 8 experts top-2 plus
a shared expert, d=256, local experts) under Interleaved1F1B and DualPipeV, each with ``overlap_b_f=True``
(forward of one microbatch and backward of another on two threads) against the same schedule without
it, rounds interleaved, the ratio printed (target <= 0.8x) with the load. One more step of each
overlapped schedule runs under ``torch.profiler`` (all threads); its chrome trace goes to
``BENCH_TRACE_DIR`` (default: a temporary directory) and the time during which a forward and a backward
of different threads are both open is measured from it (``hyper_parallel.devtools.trace_overlap``): the
structural overlap, whatever the wall clock says on a machine without two free cores.

    python benchmarks/pipeline.py          # self-launches torchrun with 2 ranks
    BENCH_ROUNDS=5 BENCH_ITERS=3 python benchmarks/pipeline.py
    BENCH_PART=overlap python benchmarks/pipeline.py   # only the overlap_b_f part (compare: only the first)
"""
from __future__ import annotations

import copy
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position

SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble",
             "DualPipeV")


def _mlp_parts(num_stages: int, d: int = 1024, layers: int = 8):
    import torch
    from torch import nn
    torch.manual_seed(0)
    per = layers // num_stages
    return [nn.Sequential(*[m for _ in range(per) for m in (nn.Linear(d, d), nn.Tanh())])
            for _ in range(num_stages)]


def _llama_parts(num_stages: int):
    import torch
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS
    from hyper_parallel.pipeline.split import module_names_per_stage
    from hyper_parallel.pipeline._torch.split import pipeline_module_split
    torch.manual_seed(0)
    model = LlamaForCausalLM(TINY_CONFIGS["small"])
    names = module_names_per_stage(model.config.num_hidden_layers, num_stages, layer_prefix="model.layers",
                                   first=("model.embed_tokens",), last=("model.norm", "lm_head"))
    return pipeline_module_split(model, names)


def _build(lib: str, name: str, parts, mine, m: int, loss_fn):
    import hyper_parallel.pipeline as hpp
    import torch.distributed.pipelining as tpp
    from torch.distributed.pipelining.schedules import get_schedule_class as torch_schedule_class
    mod = hpp if lib == "ours" else tpp
    n = len(parts)
    stages = [mod.PipelineStage(copy.deepcopy(parts[s]), s, n, "cpu") for s in mine]
    cls = hpp.get_schedule_class(name) if lib == "ours" else torch_schedule_class(name)
    multi = len(mine) > 1
    kwargs = {} if lib == "ours" else {"scale_grads": True}
    return cls(stages if multi else stages[0], m, loss_fn=loss_fn, **kwargs)


def _placement(name: str, world: int, m: int):
    from hyper_parallel.pipeline import generate_schedule
    from hyper_parallel.pipeline.schedules import SCHEDULES as KINDS
    v = 2 if KINDS[name].multi else 1
    return generate_schedule(name, world, m, v)


def _workload(model: str, name: str, world: int):
    import torch
    if model == "mlp":
        m, rows = 8, 64
        plan = _placement(name, world, m)
        return plan, _mlp_parts(plan.num_stages), torch.randn(rows, 1024), torch.randn(rows, 1024), \
            torch.nn.functional.mse_loss
    from hyper_parallel.models.llama3 import LlamaForCausalLM
    m, rows = 4, 8
    plan = _placement(name, world, m)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 1024, (rows, 64), generator=g), torch.randint(0, 1024, (rows, 64), generator=g)
    return plan, _llama_parts(plan.num_stages), x, y, LlamaForCausalLM.loss


def _idle(sched, step, plan, world: int):
    """(measured idle fraction per rank, simulated idle fraction per rank with the measured mean costs)."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.pipeline import simulate_schedule
    sched.record_timeline = True
    dist.barrier()
    step("ours")
    tl = sched.timeline
    busy = sum(e - s for s, e, _ in tl)
    lo = torch.tensor([min(s for s, _, _ in tl)], dtype=torch.float64)
    hi = torch.tensor([max(e for _, e, _ in tl)], dtype=torch.float64)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    costs = {}
    for s, e, a in tl:
        for leaf in a.leaves():
            costs.setdefault(leaf.type.value, []).append((e - s) / len(a.leaves()))
    gathered = [None] * world
    dist.all_gather_object(gathered, (1.0 - busy / (hi.item() - lo.item()), costs))
    merged = {}
    for _, c in gathered:
        for k, v in c.items():
            merged.setdefault(k, []).extend(v)
    mean = {k: statistics.mean(v) for k, v in merged.items()}
    sim_costs = {k: mean[k] for k in ("F", "I", "W") if k in mean}
    if "B" in mean:
        sim_costs["B"] = mean["B"]
        sim_costs.setdefault("I", mean["B"] / 2)
        sim_costs.setdefault("W", mean["B"] / 2)
    sim = simulate_schedule(plan, sim_costs)
    return [g[0] for g in gathered], [sim.idle_fraction(r) for r in range(world)]


def _run_case(model: str, name: str, world: int, rank: int, rounds: int, iters: int):
    plan, parts, x, y, loss_fn = _workload(model, name, world)
    m = plan.n_microbatches
    mine = list(plan.stages_of(rank))
    first, last = 0 in mine, plan.num_stages - 1 in mine
    scheds = {lib: _build(lib, name, parts, mine, m, loss_fn) for lib in ("ours", "torch")}

    def step(lib):
        scheds[lib].step(x if first else None, target=y if last else None)

    times = time_interleaved({lib: (lambda s=lib: step(s)) for lib in scheds}, iters, warmup=2, rounds=rounds)
    measured, simulated = _idle(scheds["ours"], step, plan, world)
    closed = (world - 1) / (m + world - 1) if name in ("GPipe", "1F1B") else None
    return times, measured, simulated, closed, m


def _moe_parts(num_stages: int, d: int = 256):
    import torch
    from torch import nn
    from hyper_parallel.moe import MoE, MoEConfig

    class Block(nn.Module):
        """``x + MoE(tanh(lin(x)))``."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(d, d)
            self.moe = MoE(MoEConfig(num_experts=8, top_k=2, dim=d, hidden_dim=d, num_shared_experts=1))
            self.moe.reset_parameters(0.05)

        def forward(self, x):
            """The block."""
            h = torch.tanh(self.lin(x))
            return h + self.moe(h)

    torch.manual_seed(0)
    return [Block() for _ in range(num_stages)]


def _overlap_case(name: str, world: int, rank: int, rounds: int, iters: int, trace_dir: str):
    """(times with and without overlap_b_f, trace overlap report) of one schedule on the MoE blocks."""
    import torch
    from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile
    import hyper_parallel.pipeline as hpp
    from hyper_parallel.devtools.trace_overlap import trace_overlap
    m, rows = 8, 512
    plan = _placement(name, world, m)
    parts = _moe_parts(plan.num_stages)
    mine = list(plan.stages_of(rank))
    first, last = 0 in mine, plan.num_stages - 1 in mine
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(rows, 256, generator=g), torch.randn(rows, 256, generator=g)
    scheds = {}
    for label, on in (("overlap_b_f", True), ("sequential", False)):
        stages = [hpp.PipelineStage(copy.deepcopy(parts[s]), s, plan.num_stages, "cpu") for s in mine]
        scheds[label] = hpp.get_schedule_class(name)(stages, m, loss_fn=torch.nn.functional.mse_loss, overlap_b_f=on)

    def step(label):
        scheds[label].step(x if first else None, target=y if last else None)

    times = time_interleaved({k: (lambda k=k: step(k)) for k in scheds}, iters, warmup=2, rounds=rounds)
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        step("overlap_b_f")
    path = os.path.join(trace_dir, f"pipeline_overlap_b_f_{name}_rank{rank}.json")
    prof.export_chrome_trace(path)
    report = trace_overlap(path, r"hp\.pp\.compute\.\d+F", r"hp\.pp\.compute\.\d+[BI]")
    return times, report, path


def overlap_part(world: int, rank: int, rounds: int, iters: int) -> None:
    """PP with MoE: overlap_b_f vs the same schedule without it; trace overlap per rank."""
    import tempfile
    import torch.distributed as dist
    trace_dir = os.environ.get("BENCH_TRACE_DIR") or tempfile.mkdtemp(prefix="hp_pipeline_trace_")
    os.makedirs(trace_dir, exist_ok=True)
    load0 = os.getloadavg()
    rows, trace_rows = [], []
    for name in ("Interleaved1F1B", "DualPipeV"):
        times, report, path = _overlap_case(name, world, rank, rounds, iters, trace_dir)
        ratio = times["overlap_b_f"] / times["sequential"]
        rows.append((name, fmt_time(times["overlap_b_f"]), fmt_time(times["sequential"]), f"{ratio:.3f}x",
                     "MET" if ratio <= 0.8 else "MISSED"))
        every = [None] * world
        dist.all_gather_object(every, (str(report), path, report.both_us, report.b_us))
        for r, (text, p, _, _) in enumerate(every):
            trace_rows.append((name, r, text, p))
    load1 = os.getloadavg()
    print_table(f"PP with MoE (4 stages, 8 experts top-2 + shared, d=256, m=8, 512 rows): overlap_b_f vs "
                f"sequential, {world} ranks, load average before {load0[0]:.1f}, after {load1[0]:.1f} on "
                f"{os.cpu_count()} cores", rows, ("schedule", "overlap_b_f", "sequential", "ratio", "target <= 0.8x"))
    print_table("overlap_b_f trace (one step, torch.profiler, all threads): forward (a) vs backward (b) "
                "intervals of different threads", trace_rows, ("schedule", "rank", "intersection", "trace"))


def main() -> None:
    """Run every (model, schedule) case and print the tables on rank 0."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    iters = int(os.environ.get("BENCH_ITERS", "3"))
    models = os.environ.get("BENCH_MODELS", "mlp,llama").split(",")
    only = os.environ.get("BENCH_SCHEDULES")
    part = os.environ.get("BENCH_PART", "all")
    if part not in ("all", "compare", "overlap"):
        raise SystemExit(f"BENCH_PART: expected all, compare or overlap, got {part!r}")
    if part == "overlap":
        models = []
    for model in models:
        rows, idle_rows = [], []
        for name in (only.split(",") if only else SCHEDULES):
            times, measured, simulated, closed, m = _run_case(model, name, world, rank, rounds, iters)
            rows.append((name, m, fmt_time(times["ours"]), fmt_time(times["torch"]),
                         f"{times['ours'] / times['torch']:.2f}"))
            for r in range(world):
                rel = f"{(measured[r] - simulated[r]) / simulated[r] * 100:+.0f}%" if simulated[r] else "-"
                idle_rows.append((name, r, f"{measured[r]:.3f}", f"{simulated[r]:.3f}",
                                  "-" if closed is None else f"{closed:.3f}", rel))
        load = os.getloadavg()
        print_table(f"{model}: step time, ours vs torch.distributed.pipelining ({world} ranks, load average "
                    f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", rows,
                    ("schedule", "m", "ours", "torch", "ours/torch"))
        print_table(f"{model}: idle fraction of the step per rank (ours, from per-step timings)", idle_rows,
                    ("schedule", "rank", "measured", "simulated (measured costs)", "closed form", "measured vs sim"))
    if part in ("all", "overlap"):
        overlap_part(world, rank, rounds, iters)
    dist.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
