# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: Mpipe with the encoder stage on 2 ranks (data parallel) vs on 1 rank, Qwen3-VL on 4 gloo ranks.

The model and the mixed batch are ``benchmarks/mpipe.py``'s (vision: 4 blocks, width 128; language model: 6 layers,
width 256; 8 samples: 2 text-only, 3 small and 3 large images), 4 microbatches of 2 samples, Mpipe
(``ScheduleMpipe``: the encoder's forwards ahead, microbatches balanced by image patches), the same 4 ranks:

* ``encoder on 1 rank``: the encoder stage on rank 0, the decoder layers 2 / 2 / 2 on ranks 1-3 (``hp-train``'s
  ``vl_encoder_ranks = 1``);
* ``encoder on 2 ranks``: the encoder stage on ranks 0-1, each encoding one sample of every microbatch, the decoder
  layers 3 / 3 on ranks 2-3 (``vl_encoder_ranks = 2``).

Rounds are interleaved; printed with the load average: the median step time (slowest rank) of each and the ratio.
On a shared 2-core machine 4 ranks time-share the cores, so the ratio says more about total work per step than
about what separate devices would do.

    python benchmarks/mpipe_encoder_group.py            # self-launches torchrun with 4 ranks
    BENCH_ROUNDS=7 BENCH_ITERS=2 python benchmarks/mpipe_encoder_group.py
"""
from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position
from mpipe import _batch, _config  # noqa: E402  pylint: disable=wrong-import-position

#: mode -> (encoder ranks, decoder layers per stage)
MODES = {"encoder on 1 rank": (1, [0, 2, 2, 2]), "encoder on 2 ranks": (2, [0, 3, 3])}


def main() -> None:
    """Build both pipelines, time them interleaved and print the table on rank 0."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from hyper_parallel.models.qwen3_vl import Qwen3VLForConditionalGeneration
    from hyper_parallel.models.qwen3_vl.pipeline import image_token_costs, pipeline_qwen3_vl
    from hyper_parallel.pipeline import MpipeConfig
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rounds, iters = int(os.environ.get("BENCH_ROUNDS", "5")), int(os.environ.get("BENCH_ITERS", "2"))
    cfg = _config()
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    _, packed, labels = _batch(cfg)
    costs = image_token_costs(packed)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))

    runs = {mode: (k, *pipeline_qwen3_vl(copy.deepcopy(model), n_microbatches=4, placement="mpipe", loss_fn=loss_fn,
                                         layers_per_stage=split, mpipe_config=MpipeConfig(), encoder_ranks=k))
            for mode, (k, split) in MODES.items()}

    def step(mode):
        k, sched, part = runs[mode]
        for p in part.parameters():
            p.grad = None
        args = (packed["input_ids"], packed["pixel_values"], packed["image_grid_thw"]) if rank < k else ()
        sched.step(*args, target=labels if rank == world - 1 else None, position_ids=packed["position_ids"],
                   attention_mask=packed["attention_mask"], sample_costs=costs)

    times = time_interleaved({mode: (lambda m=mode: step(m)) for mode in MODES}, iters, warmup=2, rounds=rounds)
    if rank == 0:
        load = os.getloadavg()
        base = times["encoder on 1 rank"]
        print_table(f"Qwen3-VL Mpipe step time on {world} ranks, m=4 (load average {load[0]:.1f} {load[1]:.1f} "
                    f"{load[2]:.1f}, {rounds} rounds x {iters} steps)",
                    [(mode, fmt_time(times[mode]), f"{times[mode] / base:.2f}") for mode in MODES],
                    ("encoder stage", "median step", "vs 1 rank"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(4)
    main()
