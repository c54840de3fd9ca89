# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallel (+ sequence parallel, + loss parallel) training of the tiny Llama.

    torchrun --standalone --nproc_per_node 2 examples/tp_llama.py [--steps 5] [--no-sp] [--no-loss-parallel]

Every rank also trains an identical single-process copy, and rank 0 prints both loss curves.
"""
from __future__ import annotations

import argparse
import copy
import sys

import torch
import torch.distributed as dist

import hyper_parallel as hp
from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama
from hyper_parallel.tp import vocab_parallel_cross_entropy


def run(steps: int = 5, sequence_parallel: bool = True, loss_parallel: bool = True, config: str = "debug"):
    """Train both copies; return (tp_losses, single_process_losses)."""
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    ref = LlamaForCausalLM(TINY_CONFIGS[config])
    model = parallelize_llama(copy.deepcopy(ref), mesh, sequence_parallel=sequence_parallel,
                              loss_parallel=loss_parallel)
    vocab = ref.config.vocab_size
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    ours, theirs = [], []
    for step in range(steps):
        gen = torch.Generator().manual_seed(step)
        ids = torch.randint(0, vocab, (4, 32), generator=gen)
        labels = torch.roll(ids, -1, dims=1)
        for m, o, out, parallel in ((model, opt, ours, True), (ref, ref_opt, theirs, False)):
            o.zero_grad()
            logits = m(ids)
            if parallel and loss_parallel:
                loss = vocab_parallel_cross_entropy(logits, labels)
            else:
                loss = LlamaForCausalLM.loss(logits, labels)
            loss.backward()
            o.step()
            out.append(loss.item())
    return ours, theirs


def main(argv=None) -> int:
    """Parse flags, train, print the loss table on rank 0; exit 1 if the curves differ."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--no-sp", action="store_true", help="tensor parallel without sequence parallel")
    parser.add_argument("--no-loss-parallel", action="store_true", help="gather the logits for the loss")
    args = parser.parse_args(argv)
    hp.init_process_group("gloo")
    torch.set_num_threads(1)
    ours, theirs = run(args.steps, not args.no_sp, not args.no_loss_parallel)
    ok = all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(ours, theirs))
    if dist.get_rank() == 0:
        print(f"== tiny Llama, TP={dist.get_world_size()}, SP={not args.no_sp}, "
              f"loss parallel={not args.no_loss_parallel} ==")
        print("step  TP loss     1-process loss")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            print(f"{i:<5} {a:<11.6f} {b:.6f}")
        print("loss curves match" if ok else "LOSS CURVES DIFFER")
    hp.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
