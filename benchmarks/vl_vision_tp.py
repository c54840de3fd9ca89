# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: tensor parallel of Qwen3-VL's vision tower vs a replicated vision tower, TP 2 on 2 gloo ranks.

The model is a small Qwen3-VL (vision: 4 blocks, width 256, 4 heads, MLP 1024, DeepStack after blocks 1 and 2;
language model: 4 layers, width 256) and the batch 4 samples, each with one 128x128-pixel image (256 patches, 64
merged tokens) and 16 text tokens. Both modes shard the language model the same way
(:func:`~hyper_parallel.models.qwen3_vl.parallelize.qwen3_vl_tp_plan` without the vision entries); ``vision TP``
adds :func:`~hyper_parallel.models.qwen3_vl.parallelize.vision_tp_plan` (attention by heads, MLPs and mergers),
``vision replicated`` runs the whole tower on both ranks. A step: forward, loss, backward. Rounds are interleaved
(replicated, TP, replicated, ...); printed with the load average: the median step time (slowest rank), its ratio
to the replicated tower, the vision parameters per rank, and the first step's loss of each mode (equal: the same
function).

    python benchmarks/vl_vision_tp.py            # self-launches torchrun with 2 ranks
    BENCH_ROUNDS=7 BENCH_ITERS=2 python benchmarks/vl_vision_tp.py
"""
from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position
from mpipe import _config as mpipe_config  # noqa: E402  pylint: disable=wrong-import-position

MODES = ("vision replicated", "vision TP")


def _config():
    return mpipe_config(text_layers=4, vision_hidden=256, vision_intermediate=1024)


def _batch(cfg, samples: int = 4, side: int = 16):
    """``samples`` rows, each one ``side x side``-patch image between 8 + 8 text tokens."""
    import torch
    g = torch.Generator().manual_seed(0)
    width = 3 * 2 * 8 * 8
    rows = []
    for _ in range(samples):
        text = torch.randint(1, 900, (16,), generator=g).tolist()
        rows.append(text[:8] + [cfg.vision_start_token_id] + [cfg.image_token_id] * (side * side // 4)
                    + [cfg.vision_end_token_id] + text[8:])
    ids = torch.tensor(rows)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(samples * side * side, width, generator=g),
            "image_grid_thw": torch.tensor([[1, side, side]] * samples)}


def _parallelize(model, mesh, vision: bool):
    import hyper_parallel as hp
    from hyper_parallel.models.qwen3_vl.parallelize import qwen3_vl_tp_plan
    hp.parallelize_module(model, mesh, qwen3_vl_tp_plan(model.config, vision=vision))
    return model


def _vision_params(model) -> int:
    """Vision-tower parameter elements held by this rank."""
    total = 0
    for p in model.model.visual.parameters():
        total += (p.to_local() if hasattr(p, "to_local") else p).numel()
    return total


def main() -> None:
    """Time both modes on 2 ranks (self-launched) and print the table on rank 0."""
    ensure_launched(2)
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models.qwen3_vl import Qwen3VLForConditionalGeneration
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    cfg = _config()
    torch.manual_seed(0)
    base = Qwen3VLForConditionalGeneration(cfg)
    mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    models = {"vision replicated": _parallelize(copy.deepcopy(base), mesh, False),
              "vision TP": _parallelize(copy.deepcopy(base), mesh, True)}
    batch = _batch(cfg)
    labels = torch.cat([batch["input_ids"][:, 1:], torch.full((batch["input_ids"].shape[0], 1), -100)], 1)
    first = {}

    def step(mode):
        model = models[mode]
        for p in model.parameters():
            p.grad = None
        loss = Qwen3VLForConditionalGeneration.loss(model(**batch), labels)
        loss.backward()
        first.setdefault(mode, float(loss.detach()))

    rounds, iters = int(os.environ.get("BENCH_ROUNDS", "5")), int(os.environ.get("BENCH_ITERS", "2"))
    times = time_interleaved({m: (lambda m=m: step(m)) for m in MODES}, iters=iters, warmup=2, rounds=rounds)
    ref = times[MODES[0]]
    rows = [(m, fmt_time(times[m]), f"{times[m] / ref:.2f}", _vision_params(models[m]), f"{first[m]:.6f}")
            for m in MODES]
    load = os.getloadavg()[0]
    print_table(f"Qwen3-VL TP 2, 4 samples x 256 patches, {rounds} rounds x {iters} steps, load {load:.1f}", rows,
                ("mode", "step (median, slowest rank)", "ratio", "vision params / rank", "first loss"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
