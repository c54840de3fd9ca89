# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""hp-train's training loop vs a TorchTitan-style plain torch loop, 2 CPU ranks, the ``small`` Llama, FSDP.

    python benchmarks/trainer.py [--rounds 5] [--steps 4] [--seq 128] [--batch 8]   (launches itself with torchrun)

* ``ours``: ``hyper_parallel.trainer.LLMTrainer`` (our ``fully_shard`` per layer + root over 2 ranks,
  ``get_hyper_optimizer`` AdamW, LR schedule, clip, the data loader, metrics and callbacks) stepping with
  ``trainer.train_step``;
* ``plain torch``: the same model class, init and batches (rows from the same loader) through
  ``torch.distributed.fsdp.fully_shard`` (FSDP2, per layer + root), ``torch.optim.AdamW``,
  ``torch.nn.utils.clip_grad_norm_`` and ``LambdaLR`` — the loop TorchTitan writes.

Rounds interleave (ours, then plain, ``--steps`` steps each) so machine noise hits both alike. Printed:
median tokens/s of each and the ratio, and our trainer's overhead (time outside forward/backward/optimizer:
data, loss all-reduce, metrics, callbacks) as a share of the step. Targets (issue #21): ratio >= 1.0,
overhead <= 3 %.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402  # pylint: disable=wrong-import-position
import torch.distributed as dist  # noqa: E402  # pylint: disable=wrong-import-position

from _common import ensure_launched, print_table  # noqa: E402  # pylint: disable=wrong-import-position,import-error


def _ours(args):
    from hyper_parallel.trainer.api import LLMTrainer
    from hyper_parallel.trainer.config import load_config
    cfg = load_config(None, [("model.flavor", "small"), ("job.nproc", 2), ("parallelism.dp_shard", 2),
                             ("training.steps", 10_000), ("training.global_batch", args.batch),
                             ("training.seq_len", args.seq), ("training.clip_grad_norm", 1.0),
                             ("optimizer.lr", 1e-3), ("optimizer.weight_decay", 0.1), ("optimizer.warmup_steps", 10),
                             ("optimizer.decay", "cosine"), ("metrics.progress", False), ("metrics.jsonl", False),
                             ("metrics.plot", False), ("metrics.moe_monitor", False), ("metrics.log_every", 100_000),
                             ("job.out_dir", "/tmp/hp_bench_trainer")])
    trainer = LLMTrainer(cfg)
    trainer.setup()
    return trainer


def _plain(trainer, args):
    """TorchTitan-style loop on torch FSDP2 over the same model init and the same batches."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from hyper_parallel.models.llama3.model import LlamaForCausalLM
    from hyper_parallel.optim.lr import LRLambda
    from hyper_parallel.trainer.data import DistributedBatchLoader
    torch.manual_seed(0)
    model = LlamaForCausalLM(trainer.backend.model.config)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, LRLambda(warmup_steps=10, decay="cosine", total_steps=10_000))
    loader = DistributedBatchLoader(trainer.dataset, args.batch, dp_rank=dist.get_rank(),
                                    dp_size=dist.get_world_size(), seed=0)

    def step():
        batch = torch.tensor(loader.next_batch(), dtype=torch.long)
        loss = LlamaForCausalLM.loss(model(batch[:, :-1]).float(), batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        return loss
    return step


def main() -> None:
    """Interleaved rounds; the table on rank 0."""
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    ensure_launched(2)
    trainer = _ours(args)
    plain = _plain(trainer, args)
    tokens = args.batch * args.seq
    ours_t, plain_t, overhead = [], [], []
    step = 0
    for _ in range(2):  # warm-up
        step += 1
        trainer.train_step(step)
        plain()
    for _ in range(args.rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step += 1
            m = trainer.train_step(step)
            overhead.append(m["overhead_s"] / m["step_s"])
        ours_t.append((time.perf_counter() - start) / args.steps)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            plain()
        plain_t.append((time.perf_counter() - start) / args.steps)
    o, q = statistics.median(ours_t), statistics.median(plain_t)
    load = os.getloadavg()
    print_table(f"trainer: small Llama, FSDP over 2 ranks, batch {args.batch} x seq {args.seq} (load avg "
                f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f})",
                [("hp-train LLMTrainer", f"{o * 1e3:.1f} ms", f"{tokens / o:,.0f}", f"{q / o:.2f}x",
                  f"{statistics.median(overhead) * 100:.2f} %"),
                 ("plain torch FSDP2 loop", f"{q * 1e3:.1f} ms", f"{tokens / q:,.0f}", "1.00x", "")],
                ("loop", "step (median)", "tokens/s", "vs plain torch", "overhead"))
    trainer.close()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
