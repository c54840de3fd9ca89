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


def _mesh(plan: ParallelPlan):
    import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
    dims = [(n, getattr(plan, n)) for n in ("pp", "dp_shard", "tp") if getattr(plan, n) > 1]
    if not dims:
        return None
    return hp.init_device_mesh("cpu", tuple(s for _, s in dims), mesh_dim_names=tuple(n for n, _ in dims))


def _pipeline(model, plan: ParallelPlan, mesh):
    from hyper_parallel.pipeline.api import PipelineStage, get_schedule_class  # pylint: disable=import-outside-toplevel
    from hyper_parallel.pipeline.schedules import generate_schedule  # pylint: disable=import-outside-toplevel
    from hyper_parallel.pipeline._torch.split import pipeline_module_split  # pylint: disable=import-outside-toplevel
    from hyper_parallel.auto_parallel.memory import stage_layers  # pylint: disable=import-outside-toplevel
    group = mesh["pp"].get_group() if mesh.ndim > 1 else mesh.get_group()
    rank = dist.get_rank(group)
    cls = get_schedule_class(plan.schedule)
    sched_plan = generate_schedule(cls.schedule_name, plan.pp, plan.microbatches, plan.stages_per_rank)
    layers = stage_layers(model.config.num_hidden_layers, plan)
    names = []
    for s, ids in enumerate(layers):
        part = ["model.embed_tokens"] if s == 0 else []
        part += [f"model.layers.{i}" for i in ids]
        names.append(part + (["model.norm", "lm_head"] if s == len(layers) - 1 else []))
    mine = [s for s in range(sched_plan.num_stages) if sched_plan.stage_to_rank[s] == rank]
    parts = pipeline_module_split(model, names, mine)
    stages = [PipelineStage(p, s, sched_plan.num_stages, "cpu", group=group) for p, s in zip(parts, mine)]
    return cls(stages if cls.multi else stages[0], plan.microbatches, loss_fn=type(model).loss), parts


def _apply_dense(module, plan: ParallelPlan, mesh) -> None:
    from hyper_parallel.models.llama3 import parallelize_llama  # pylint: disable=import-outside-toplevel
    if plan.activation == "full":
        from hyper_parallel.activation import apply_activation_policy  # pylint: disable=import-outside-toplevel
        apply_activation_policy(module, {"mode": "full", "layers": "model.layers.*"})
    tp_mesh = mesh["tp"] if plan.tp > 1 else None
    fsdp_mesh = mesh["dp_shard"] if plan.dp_shard > 1 else None
    parallelize_llama(module, tp_mesh, sequence_parallel=plan.sequence_parallel)
    if fsdp_mesh is not None:  # per decoder layer, then the root (a pipeline part keeps its layers in a dict)
        from hyper_parallel.fsdp._torch.fully_shard import fully_shard  # pylint: disable=import-outside-toplevel
        layers = module.model.layers
        for layer in (layers.values() if hasattr(layers, "values") else layers):
            fully_shard(layer, mesh=fsdp_mesh)
        fully_shard(module, mesh=fsdp_mesh)


def _apply_moe(model, plan: ParallelPlan, mesh) -> None:
    from hyper_parallel.models.llama3 import parallelize_llama_moe  # pylint: disable=import-outside-toplevel
    if plan.activation == "full":
        from hyper_parallel.activation import apply_activation_policy  # pylint: disable=import-outside-toplevel
        apply_activation_policy(model, {"mode": "full", "layers": "model.layers.*"})
    if plan.tp > 1:
        sub = mesh["dp_shard", "tp"] if plan.dp_shard > 1 else None
        if sub is None:
            raise ValueError("measure_plan: MoE with tp > 1 needs dp_shard > 1 (mesh ('dp', 'tp'))")
    parallelize_llama_moe(model, mesh, ep=plan.ep)


def build_parallel_model(config, plan: ParallelPlan):
    """The model (or this rank's pipeline parts) with ``plan`` applied; returns ``(runner, params)`` where
    ``runner(ids, labels)`` runs forward + backward of one step."""
    from hyper_parallel.models.llama3 import LlamaForCausalLM  # pylint: disable=import-outside-toplevel
    unsupported = [n for n in ("dp_replicate", "cp") if getattr(plan, n) > 1]
    if unsupported:
        raise ValueError(f"measure_plan: {unsupported} > 1 is not measured by this runner (estimates only)")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    mesh = _mesh(plan)
    if plan.pp > 1:
        sched, parts = _pipeline(model, plan, mesh)
        for part in parts:
            _apply_dense(part, plan, mesh)
        params = [p for part in parts for p in part.parameters()]

        def run_pp(ids, labels):
            sched.step(ids, target=labels)
        return run_pp, params
    if config.moe is not None:
        _apply_moe(model, plan, mesh)
    else:
        _apply_dense(model, plan, mesh)

    def run(ids, labels):
        model.loss(model(ids), labels).backward()
    return run, list(model.parameters())


def _batch(config, plan: ParallelPlan, train: TrainConfig, step: int):
    g = torch.Generator().manual_seed(100 + step)
    shape = (train.global_batch, train.seq_len)
    ids = torch.randint(0, config.vocab_size, shape, generator=g)
    labels = torch.randint(0, config.vocab_size, shape, generator=g)
    if plan.dp_shard > 1:
        rank = dist.get_rank()
        dp_rank = (rank // plan.tp) % plan.dp_shard
        local = train.global_batch // plan.dp_shard
        ids, labels = ids[dp_rank * local:(dp_rank + 1) * local], labels[dp_rank * local:(dp_rank + 1) * local]
    return ids, labels


def measure_plan(config, plan: ParallelPlan, train: TrainConfig, *, tracked_steps: int = 2,
                 timed_steps: int = 3, threads: int = 1) -> Dict[str, Any]:
    """Measure ``plan`` on this rank's process group: ``{"peak_bytes": [per rank], "step_s": slowest rank's
    median step seconds, "step_s_all": every timed step, "ranks": world}``."""
    from hyper_parallel.testing.memory import AllocationTracker  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(threads)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if plan.world_size != world:
        raise ValueError(f"measure_plan: the plan uses {plan.world_size} ranks, the process group has {world}")
    gc.collect()  # what an earlier run in this process left behind must not be freed inside the session
    with AllocationTracker(by_pointer=True) as tracker:
        runner, params = build_parallel_model(config, plan)
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
        for step in range(1 + tracked_steps):
            gc.collect()  # garbage cycles of the previous step (autograd graphs) are freed at a fixed point
            tracker.mark(f"step{step}")
            runner(*_batch(config, plan, train, step))
            opt.step()
            opt.zero_grad(set_to_none=True)
        tracker.mark("end")
    step_peaks = [tracker.peak(f"step{s}", f"step{s + 1}" if s + 1 <= tracked_steps else "end")
                  for s in range(1, tracked_steps + 1)]
    peak = max(step_peaks)
    times: List[float] = []
    for step in range(timed_steps):
        ids, labels = _batch(config, plan, train, 10 + step)
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        runner(ids, labels)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if world > 1:
            dist.barrier()
        times.append(time.perf_counter() - t0)
    peaks = [(peak, step_peaks)] * world
    if world > 1:
        dist.all_gather_object(peaks, (peak, step_peaks))
    return {"peak_bytes": [p for p, _ in peaks], "step_peaks": [s for _, s in peaks],
            "step_s": statistics.median(times), "step_s_all": times, "ranks": world}


def measure_flavor(flavor: str, plan: ParallelPlan, train: TrainConfig, **kwargs: Any) -> Dict[str, Any]:
    """:func:`measure_plan` on ``hyper_parallel.models.llama.TINY_CONFIGS[flavor]`` (a module-level entry point
    for ``run_on_ranks``)."""
    from hyper_parallel.models.llama3 import TINY_CONFIGS  # pylint: disable=import-outside-toplevel
    return measure_plan(TINY_CONFIGS[flavor], plan, train, **kwargs)
