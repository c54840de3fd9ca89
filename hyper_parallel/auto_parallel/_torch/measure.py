# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Run a :class:`ParallelPlan` for real on the tiny Llama and measure peak memory and step time.

Called on every rank of an initialised process group (``hyper_parallel.testing.run_on_ranks`` or
torchrun). The tracked memory is the CPU allocator's live bytes (``AllocationTracker(by_pointer=True)``:
allocation events replayed by address, so a buffer that a gloo worker thread frees unseen does not make
the total drift) relative to just before the model is built, so it holds parameters, gradients,
optimizer states, activations, FSDP buffers and temporaries; the peak is the highest of the
steady-state steps (optimizer states exist), each step's peak is returned too. Step time: the median
over the timed steps of the slowest rank, measured after the tracked steps without the profiler.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Dict, List

import torch
import torch.distributed as dist

from hyper_parallel.auto_parallel.plan import ParallelPlan, TrainConfig

__all__ = ["build_parallel_model", "measure_plan"]


def _dims(plan: ParallelPlan):
    from hyper_parallel.models import ParallelDims  # pylint: disable=import-outside-toplevel
    return ParallelDims(dp_replicate=plan.dp_replicate, dp_shard=plan.dp_shard, cp=plan.cp, tp=plan.tp, pp=plan.pp,
                        ep=plan.ep, world_size=plan.world_size)


def _pipeline_runner(model, plan: ParallelPlan, dims, kwargs):
    """This rank's stage modules (``pipelining_fn`` with the plan's stage split, then ``parallelize_fn`` on each)
    and a runner feeding the first stage the ids and the last one the labels."""
    from hyper_parallel.auto_parallel.memory import stage_layers  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    spec, world = get_model_spec("llama3"), dims.mesh("world")
    split = [len(ids) for ids in stage_layers(model.config.num_hidden_layers, plan)]
    sched, parts = spec.pipelining_fn(model, world, dims, schedule=plan.schedule, n_microbatches=plan.microbatches,
                                      layers_per_stage=split)
    stages = [spec.parallelize_fn(part, world, dims, **kwargs) for part in parts]
    first = any(getattr(p.model, "embed_tokens", None) is not None for p in stages)
    last = any(getattr(p, "lm_head", None) is not None for p in stages)

    def run_pp(ids, labels, _pos):
        sched.step(ids if first else None, target=labels if last else None)
    return run_pp, [p for part in stages for p in part.parameters()]


def build_parallel_model(config, plan: ParallelPlan):
    """The model (or this rank's pipeline stages) with ``plan`` applied through the model registry's
    ``parallelize_fn`` / ``pipelining_fn`` (HSDP, FSDP, TP + SP, CP, PP with TP/FSDP inside the stages, EP
    for MoE models, the activation policy), as ``hp-train`` builds it; returns ``(runner, params)`` where
    ``runner(ids, labels, positions)`` runs forward + backward of one step on this rank's batch."""
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.llama3 import LlamaForCausalLM  # pylint: disable=import-outside-toplevel
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    activation = {"mode": "full", "layers": "model.layers.*"} if plan.activation == "full" else None
    cp_mesh = None
    if plan.world_size == 1:
        if activation is not None:
            from hyper_parallel.activation import apply_activation_policy  # pylint: disable=C0415
            apply_activation_policy(model, activation)
    else:
        dims = _dims(plan)
        dims.build_mesh()  # the platform's device type
        kwargs = {"sequence_parallel": plan.sequence_parallel, "activation": activation}
        if plan.pp > 1:
            return _pipeline_runner(model, plan, dims, kwargs)
        model = get_model_spec("llama3").parallelize_fn(model, dims.mesh("world"), dims, **kwargs)
        cp_mesh = dims.mesh("cp")

    def run(ids, labels, pos):
        if cp_mesh is not None:  # this rank's sequence chunks, as hp-train shards them
            from hyper_parallel.cp import context_parallel_shard  # pylint: disable=import-outside-toplevel
            ids, labels, pos = context_parallel_shard(  # pylint: disable=unbalanced-tuple-unpacking
                cp_mesh, [ids, labels, pos], [1, 1, 0])
        model.loss(model(ids, position_ids=pos), labels).backward()
    return run, list(model.parameters())


def _batch(config, plan: ParallelPlan, train: TrainConfig, step: int):
    """This rank's ``(ids, labels, positions)``: its data-parallel part of the global batch (the runner takes
    its sequence chunks under CP)."""
    g = torch.Generator().manual_seed(100 + step)
    shape = (train.global_batch, train.seq_len)
    ids = torch.randint(0, config.vocab_size, shape, generator=g)
    labels = torch.randint(0, config.vocab_size, shape, generator=g)
    pos = torch.arange(train.seq_len)
    if plan.world_size == 1:
        return ids, labels, pos
    dims = _dims(plan)
    if dims.dp > 1:
        local = train.global_batch // dims.dp
        part = dims.dp_rank(dist.get_rank())
        ids, labels = ids[part * local:(part + 1) * local], labels[part * local:(part + 1) * local]
    return ids, labels, pos


def _step(runner, opt, batch) -> None:
    runner(*batch)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _tracked(config, plan: ParallelPlan, train: TrainConfig, tracked_steps: int):
    """Build under the tracker, run step 0 and ``tracked_steps`` steady-state steps; ``(runner, opt, peaks)``."""
    from hyper_parallel.testing.memory import AllocationTracker  # pylint: disable=import-outside-toplevel
    gc.collect()  # what an earlier run in this process left behind must not be freed inside the session
    with AllocationTracker(by_pointer=True) as tracker:
        runner, params = build_parallel_model(config, plan)
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
        for step in range(1 + tracked_steps):
            gc.collect()  # garbage cycles of the previous step (autograd graphs) are freed at a fixed point
            tracker.mark(f"step{step}")
            _step(runner, opt, _batch(config, plan, train, step))
        tracker.mark("end")
    peaks = [tracker.peak(f"step{s}", f"step{s + 1}" if s + 1 <= tracked_steps else "end")
             for s in range(1, tracked_steps + 1)]
    return runner, opt, peaks


def measure_plan(config, plan: ParallelPlan, train: TrainConfig, *, tracked_steps: int = 2,
                 timed_steps: int = 3, threads: int = 1) -> Dict[str, Any]:
    """Measure ``plan`` on this rank's process group: ``{"peak_bytes": [per rank], "step_peaks": [per rank:
    every tracked step's peak], "step_s": slowest rank's median step seconds, "step_s_all": every timed step,
    "ranks": world}``. ``tracked_steps=0``: no memory tracking (``peak_bytes`` None), one warm-up step."""
    torch.set_num_threads(threads)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if plan.world_size != world:
        raise ValueError(f"measure_plan: the plan uses {plan.world_size} ranks, the process group has {world}")
    if tracked_steps > 0:
        runner, opt, step_peaks = _tracked(config, plan, train, tracked_steps)
        peak = max(step_peaks)
    else:
        runner, params = build_parallel_model(config, plan)
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
        _step(runner, opt, _batch(config, plan, train, 0))
        step_peaks, peak = [], None
    times: List[float] = []
    for step in range(timed_steps):
        batch = _batch(config, plan, train, 10 + step)
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        _step(runner, opt, batch)
        if world > 1:
            dist.barrier()
        times.append(time.perf_counter() - t0)
    peaks = [(peak, step_peaks)] * world
    if world > 1:
        dist.all_gather_object(peaks, (peak, step_peaks))
    return {"peak_bytes": None if peak is None else [p for p, _ in peaks], "step_peaks": [s for _, s in peaks],
            "step_s": statistics.median(times), "step_s_all": times, "ranks": world}


def measure_flavor(flavor: str, plan: ParallelPlan, train: TrainConfig, **kwargs: Any) -> Dict[str, Any]:
    """:func:`measure_plan` on ``hyper_parallel.models.llama.TINY_CONFIGS[flavor]`` (a module-level entry point
    for ``run_on_ranks``)."""
    from hyper_parallel.models.llama3 import TINY_CONFIGS  # pylint: disable=import-outside-toplevel
    return measure_plan(TINY_CONFIGS[flavor], plan, train, **kwargs)
