# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: Mpipe vs "encoder on stage 0" for Qwen3-VL on 3 gloo ranks, a mixed image-text batch.

The model is a small Qwen3-VL (vision: 4 blocks, width 128; language model: 6 layers, width 256) and the batch
8 samples in a fixed shuffled order: 2 text-only, 3 small images (32x32 pixels: 16 patches) and 3 large ones
(128x128: 256 patches), every sample padded to one sequence length. Three pipelines, the same 3 ranks, 4
microbatches of 2 samples, the same model:

* ``stage0``: the naive placement, 1F1B; rank 0 holds the vision tower + embedding + 2 decoder layers, rank 1
  three layers, rank 2 one layer + head (TorchTitan's split: the first and last stage one layer lighter);
  microbatches are the batch's contiguous pairs.
* ``stage0+balance``: the same with the batch permuted by Mpipe's balancer first (the balancing alone).
* ``encoder-alone 1F1B``: Mpipe's placement (below) under plain 1F1B with contiguous microbatches: what the
  placement alone gives, without the encoder's lead and the balancing.
* ``mpipe``: ScheduleMpipe; the encoder stage (vision tower + embedding) alone on rank 0, all its forwards
  ahead, layers 0-2 on rank 1 and 3-5 + head on rank 2 (``LM_SPLIT``), microbatches balanced by image
  patches.

Rounds are interleaved (stage0, stage0+balance, encoder-alone 1F1B, mpipe, stage0, ...); printed with the load
average: the median step time of each (slowest rank) and its ratio to ``stage0``; per rank the idle fraction
of one recorded step (1 - compute / step span) and the same schedule replayed by the simulator with that
step's measured durations; and, contention-free, each schedule simulated with one-process stage costs (every
stage's forward and backward per microbatch timed on rank 0 alone while the others wait, minimum of 4
repetitions, the mode order rotated each repetition): the
bubble the schedule itself leaves, without 3 ranks time-sharing 2 cores.

    python benchmarks/mpipe.py            # self-launches torchrun with 3 ranks
    BENCH_ROUNDS=7 BENCH_ITERS=2 python benchmarks/mpipe.py
"""
from __future__ import annotations

import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position

MODES = ("stage0", "stage0+balance", "encoder-alone 1F1B", "mpipe")
#: decoder layers per stage when the encoder stage is alone on rank 0 (the same for both such modes)
LM_SPLIT = [0, 3, 3]


def _config(text_layers: int = 6, vision_hidden: int = 128, vision_intermediate: int = 512):
    """The benchmarks' small Qwen3-VL (untied, width-256 LM of ``text_layers`` layers, a 4-block vision tower of
    width ``vision_hidden``); also used by ``vl_vision_tp.py`` and ``mpipe_encoder_group.py``."""
    import dataclasses
    from hyper_parallel.models.qwen3.args import Qwen3Config
    from hyper_parallel.models.qwen3_vl.args import FLAVORS, Qwen3VLVisionConfig
    text = Qwen3Config(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=text_layers,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                       rope_theta=5000000.0, tie_word_embeddings=False)
    vision = Qwen3VLVisionConfig(depth=4, hidden_size=vision_hidden, intermediate_size=vision_intermediate,
                                 num_heads=4, patch_size=8,
                                 out_hidden_size=256, num_position_embeddings=256, deepstack_visual_indexes=(1, 2))
    return dataclasses.replace(FLAVORS["debug"], text=text, vision=vision, mrope_section=(8, 12, 12),
                               image_token_id=1000, video_token_id=1001, vision_start_token_id=1002,
                               vision_end_token_id=1003)


def _batch(cfg):
    """8 samples (text-only, small, large images) in a fixed shuffled order, packed for the pipeline."""
    import torch
    from hyper_parallel.models.qwen3_vl.pipeline import pack_vl_batch
    g = torch.Generator().manual_seed(0)
    kinds = ["text", "text", "small", "small", "small", "large", "large", "large"]
    order = torch.randperm(8, generator=g).tolist()
    kinds = [kinds[i] for i in order]
    side = {"small": 4, "large": 16}          # patches per side (8x8-pixel patches)
    width = 3 * 2 * 8 * 8                     # channels x temporal patch x patch x patch
    rows, grids, pix = [], [], []
    for k in kinds:
        text = torch.randint(1, 900, (12,), generator=g).tolist()
        if k == "text":
            rows.append(text)
            continue
        n = side[k]
        grids.append([1, n, n])
        pix.append(torch.randn(n * n, width, generator=g))
        rows.append(text[:4] + [cfg.vision_start_token_id] + [cfg.image_token_id] * (n * n // 4)
                    + [cfg.vision_end_token_id] + text[4:])
    seq = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (seq - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (seq - len(r)) for r in rows])
    labels = torch.cat([ids[:, 1:], torch.zeros(8, 1, dtype=torch.long)], 1)
    labels = labels.masked_fill(torch.cat([mask[:, 1:], torch.zeros(8, 1, dtype=torch.long)], 1) == 0, -100)
    packed = pack_vl_batch(cfg, ids, mask, torch.cat(pix), torch.tensor(grids))
    return kinds, packed, labels


def _build(mode, model, m, loss_fn):
    from hyper_parallel.pipeline import MpipeConfig
    from hyper_parallel.models.qwen3_vl.pipeline import pipeline_qwen3_vl
    if mode == "mpipe":
        return pipeline_qwen3_vl(copy.deepcopy(model), n_microbatches=m, placement="mpipe", loss_fn=loss_fn,
                                 layers_per_stage=LM_SPLIT, mpipe_config=MpipeConfig())
    if mode == "encoder-alone 1F1B":  # Mpipe's placement under plain 1F1B: no lead, contiguous microbatches
        return pipeline_qwen3_vl(copy.deepcopy(model), n_microbatches=m, placement="stage0", schedule="1F1B",
                                 layers_per_stage=LM_SPLIT, loss_fn=loss_fn)
    return pipeline_qwen3_vl(copy.deepcopy(model), n_microbatches=m, placement="stage0", schedule="1F1B",
                             loss_fn=loss_fn)


def _stepper(scheds, packed, labels, rank, world):
    import torch
    from hyper_parallel.models.qwen3_vl.pipeline import image_token_costs
    from hyper_parallel.pipeline import balance_microbatches
    costs = image_token_costs(packed)
    groups = balance_microbatches(costs, [2] * 4)
    perm = torch.tensor([i for grp in groups for i in grp])
    balanced = {k: v.index_select(0, perm) for k, v in packed.items()}
    inputs = {"stage0": (packed, labels), "stage0+balance": (balanced, labels.index_select(0, perm)),
              "encoder-alone 1F1B": (packed, labels), "mpipe": (packed, labels)}

    def step(mode):
        data, target = inputs[mode]
        args = (data["input_ids"], data["pixel_values"], data["image_grid_thw"]) if rank == 0 else ()
        extra = {"sample_costs": costs} if mode == "mpipe" and rank == 0 else {}
        for p in scheds[mode].stage_module.parameters():
            p.grad = None
        scheds[mode].sched.step(*args, target=target if rank == world - 1 else None,
                                position_ids=data["position_ids"], attention_mask=data["attention_mask"], **extra)
    return step, costs, groups


def _idle(sched, step, mode):
    """This rank's idle fraction of one recorded step: 1 - compute time / (last end - first start over ranks)."""
    import torch
    import torch.distributed as dist
    sched.record_timeline = True
    dist.barrier()
    step(mode)
    sched.record_timeline = False
    tl = sched.timeline
    busy = sum(e - s for s, e, _ in tl)
    lo = torch.tensor([min(s for s, _, _ in tl)], dtype=torch.float64)
    hi = torch.tensor([max(e for _, e, _ in tl)], dtype=torch.float64)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, (1.0 - busy / (hi.item() - lo.item()), busy, [(str(a), e - s) for s, e, a in tl]))
    return out


def _simulated(sched, measured):
    """Per-rank idle fraction of the schedule simulated with this step's measured step durations (no CPU
    contention in the waits: a rank waits only for its inputs)."""
    from hyper_parallel.pipeline import simulate_schedule
    table = {(r, name): d for r, row in enumerate(measured) for name, d in row[2]}
    sim = simulate_schedule(sched.schedule, lambda r, a: table[(r, str(a))])
    return [sim.idle_fraction(r) for r in range(len(measured))], sim.makespan


def _stage_parts(model, placement, world, layers_per_stage=None):
    from hyper_parallel.models.qwen3_vl.pipeline import Qwen3VLStageModule, stage_layers
    layers = stage_layers(model.config.text.num_hidden_layers, world, placement, layers_per_stage)
    return [Qwen3VLStageModule(model, layers[s], encoder=s == 0, head=s == world - 1) for s in range(world)]


def _forward_chain(parts, mb, target, loss_fn):
    """Forward of one microbatch through every stage (boundaries detached as in the pipeline): the seconds per
    stage and each stage's (inputs, outputs)."""
    fwd, saved = [], []
    ins = (mb["input_ids"], mb["pixel_values"], mb["image_grid_thw"])
    for part in parts:
        start = time.perf_counter()
        out = part(*ins, position_ids=mb["position_ids"], attention_mask=mb["attention_mask"])
        if part.head:
            out = loss_fn(out, target)
        fwd.append(time.perf_counter() - start)
        outs = out if isinstance(out, tuple) else (out,)
        saved.append((ins, outs))
        ins = tuple(o.detach().requires_grad_(o.is_floating_point()) for o in outs)
    return fwd, saved


def _chain_once(parts, mb, target, loss_fn):
    """One microbatch through every stage in one process: (forward seconds, backward seconds) per stage."""
    import torch
    fwd, saved = _forward_chain(parts, mb, target, loss_fn)
    bwd, grads = [], None
    for ins, outs in reversed(saved):
        start = time.perf_counter()
        if grads is None:  # the last stage: its output is the loss
            torch.autograd.backward(list(outs))
        else:
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
            torch.autograd.backward([o for o, _ in pairs], grad_tensors=[g for _, g in pairs])
        bwd.append(time.perf_counter() - start)
        grads = [t.grad if t.requires_grad else None for t in ins]
    return fwd, bwd[::-1]


def _one_process_costs(model, data, target, groups, loss_fn, world, reps=4):
    """mode -> {(rank, "F"/"B", microbatch): seconds}, each the minimum of ``reps`` runs of the stage chain in
    one process (no other pipeline rank competing for the cores), the modes interleaved rep by rep (the
    order rotated each rep) so that other jobs on the machine hit them alike."""
    split = {"mpipe": ("mpipe", LM_SPLIT), "encoder-alone 1F1B": ("stage0", LM_SPLIT)}
    parts = {}
    for mode in MODES:
        placement, layers = split.get(mode, ("stage0", None))
        parts[mode] = _stage_parts(copy.deepcopy(model), placement, world, layers)
    contiguous = [[2 * k, 2 * k + 1] for k in range(4)]
    costs = {mode: {} for mode in MODES}
    for rep in range(reps):
        for mode in MODES[rep % len(MODES):] + MODES[:rep % len(MODES)]:  # each rep starts with another mode
            mine = groups if mode in ("stage0+balance", "mpipe") else contiguous
            for k, idx in enumerate(mine):
                mb = {key: v[idx] for key, v in data.items()}
                fwd, bwd = _chain_once(parts[mode], mb, target[idx], loss_fn)
                for s in range(world):
                    for kind, val in (("F", fwd[s]), ("B", bwd[s])):
                        costs[mode][(s, kind, k)] = min(val, costs[mode].get((s, kind, k), float("inf")))
    return costs


def _simulate_modes(model, packed, labels, groups, loss_fn, world, scheds):
    """Each mode's schedule simulated with its one-process stage costs: (makespan, idle fraction per rank,
    work per rank)."""
    from hyper_parallel.pipeline import simulate_schedule
    costs = _one_process_costs(model, packed, labels, groups, loss_fn, world)
    out = {}
    for mode in MODES:
        sim = simulate_schedule(scheds[mode].sched.schedule,
                                lambda r, a, c=costs[mode]: c[(r, a.type.value, a.microbatch_index)])
        out[mode] = (sim.makespan, [sim.idle_fraction(r) for r in range(world)],
                     [sum(v for (s, _, _), v in costs[mode].items() if s == r) for r in range(world)])
    return out


class _Run:  # pylint: disable=too-few-public-methods
    def __init__(self, sched, stage_module):
        self.sched, self.stage_module = sched, stage_module


def _report(world, rounds, iters, times, idle, scheds, one):
    """The tables (rank 0)."""
    load = os.getloadavg()
    print_table(f"Qwen3-VL step time on {world} ranks, m=4 (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f},"
                f" {rounds} rounds x {iters} steps)",
                [(mode, fmt_time(times[mode]), f"{times[mode] / times['stage0']:.2f}") for mode in MODES],
                ("placement", "median step", "vs stage0"))
    sims = {mode: _simulated(scheds[mode].sched, idle[mode]) for mode in MODES}
    rows = [(mode, r, f"{idle[mode][r][0]:.3f}", f"{sims[mode][0][r]:.3f}", fmt_time(idle[mode][r][1]))
            for mode in MODES for r in range(world)]
    print_table("idle fraction of one recorded step per rank (1 - compute / step span; simulated: the schedule "
                "replayed with the measured step durations)", rows,
                ("placement", "rank", "idle", "simulated idle", "compute"))
    print_table("simulated step (measured durations, waits only for inputs)",
                [(mode, fmt_time(sims[mode][1]), f"{sims[mode][1] / sims['stage0'][1]:.2f}") for mode in MODES],
                ("placement", "simulated step", "vs stage0"))
    if one is not None:
        print_table("simulated with one-process stage costs (each stage's F/B per microbatch timed alone, min of 4)",
                    [(mode, fmt_time(one[mode][0]), f"{one[mode][0] / one['stage0'][0]:.2f}",
                      " ".join(f"{x:.3f}" for x in one[mode][1]), " ".join(fmt_time(x) for x in one[mode][2]))
                     for mode in MODES],
                    ("placement", "step", "vs stage0", "idle fraction per rank", "work per rank"))


def main() -> None:  # pylint: disable=too-many-locals
    """Build the pipelines, time them interleaved and print the tables on rank 0."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from hyper_parallel.models.qwen3_vl import Qwen3VLForConditionalGeneration
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rounds, iters = int(os.environ.get("BENCH_ROUNDS", "5")), int(os.environ.get("BENCH_ITERS", "2"))
    cfg = _config()
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    kinds, packed, labels = _batch(cfg)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))

    scheds = {mode: _Run(*_build(mode, model, 4, loss_fn)) for mode in MODES}
    step, costs, groups = _stepper(scheds, packed, labels, rank, world)
    times = time_interleaved({mode: (lambda m=mode: step(m)) for mode in MODES}, iters, warmup=2, rounds=rounds)
    idle = {mode: _idle(scheds[mode].sched, step, mode) for mode in MODES}
    one = None
    if rank == 0:  # the other ranks wait in the barrier: rank 0 has the cores to itself (but for other jobs)
        one = _simulate_modes(model, packed, labels, [torch.tensor(g) for g in groups], loss_fn, world, scheds)
        print(f"batch (shuffled): {kinds}; encoder cost (patches + 1) per microbatch: contiguous "
              f"{[costs[2 * k] + costs[2 * k + 1] for k in range(4)]}, balanced "
              f"{[sum(costs[i] for i in grp) for grp in groups]}")
    dist.barrier()
    _report(world, rounds, iters, times, idle, scheds, one)
    dist.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(3)
    main()
