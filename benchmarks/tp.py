# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: one training step (forward, backward, AdamW) of the Llama model with TP=2.

Side by side in one run, interleaved: hyper-parallel's ``parallelize_llama`` vs
``torch.distributed.tensor.parallel`` applying the same plan (same styles, same layouts) to the
same model, and the single-process step for scale. Two variants: TP only, and TP + sequence
parallel. Prints step times and the ratio ours / torch (target <= 1.0).

    python benchmarks/tp.py [--config small]      # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def torch_plan(sequence_parallel: bool):
    """The same plan as ``llama_tp_plan`` written with torch's styles."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    seq = Shard(1) if sequence_parallel else Replicate()
    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "model.layers.*.self_attn.q_proj": ColwiseParallel(),
        "model.layers.*.self_attn.k_proj": ColwiseParallel(),
        "model.layers.*.self_attn.v_proj": ColwiseParallel(),
        "model.layers.*.self_attn.o_proj": RowwiseParallel(output_layouts=seq),
        "model.layers.*.mlp.gate_proj": ColwiseParallel(),
        "model.layers.*.mlp.up_proj": ColwiseParallel(),
        "model.layers.*.mlp.down_proj": RowwiseParallel(output_layouts=seq),
        "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Replicate()),
    }
    if sequence_parallel:
        plan.update({
            "model.layers.*.input_layernorm": SequenceParallel(use_local_output=True),
            "model.layers.*.post_attention_layernorm": SequenceParallel(use_local_output=True),
            "model.norm": SequenceParallel(use_local_output=True),
            "model.layers.*.self_attn": PrepareModuleInput(input_layouts=(seq, None, None),
                                                           desired_input_layouts=(Replicate(), None, None),
                                                           use_local_output=True),
            "model.layers.*.mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),),
                                                     use_local_output=True),
        })
    return plan


def main() -> None:
    """Build the three models per variant, check they agree, time them, print ratios."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh as t_init_mesh
    from torch.distributed.tensor.parallel import parallelize_module as t_parallelize

    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.environ.get("BENCH_TP_CONFIG", "small"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    hp.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    tmesh = t_init_mesh("cpu", (world,))
    cfg = TINY_CONFIGS[args.config]
    ids = torch.randint(0, cfg.vocab_size, (4, 64), generator=torch.Generator().manual_seed(0))
    labels = torch.roll(ids, -1, dims=1)
    rows = []
    for sp in (False, True):
        torch.manual_seed(0)
        base = LlamaForCausalLM(cfg)
        ours = parallelize_llama(copy.deepcopy(base), mesh, sequence_parallel=sp)
        theirs = t_parallelize(copy.deepcopy(base), tmesh, torch_plan(sp))
        models = {"hyper_parallel": ours, "torch TP": theirs, "1 process": base}
        opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=False) for k, m in models.items()}

        def step(name, models=models, opts=opts):  # pylint: disable=dangerous-default-value
            opts[name].zero_grad()
            loss = LlamaForCausalLM.loss(models[name](ids), labels)
            loss.backward()
            opts[name].step()
            return loss.item()

        first = {k: step(k) for k in models}
        if abs(first["hyper_parallel"] - first["torch TP"]) > 1e-4:
            raise SystemExit(f"models disagree before timing: {first}")
        times = time_interleaved({k: (lambda k=k, step=step: step(k)) for k in models},
                                 iters=int(os.environ.get("BENCH_ITERS", "5")), warmup=2, rounds=5)
        rows.append((f"TP{'+SP' if sp else ''}", fmt_time(times["hyper_parallel"]), fmt_time(times["torch TP"]),
                     fmt_time(times["1 process"]), f"{times['hyper_parallel'] / times['torch TP']:.3f}x"))
    print_table(f"Llama '{args.config}' training step, TP={world} gloo ranks (median of interleaved rounds)",
                rows, ("variant", "hyper_parallel", "torch TP", "1 process", "ours/torch"))
    dist.barrier()
    hp.destroy_process_group()


if __name__ == "__main__":
    ensure_launched(2)
    main()
