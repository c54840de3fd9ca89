# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Demo section: distributed checkpoint — save while training, reload into another layout, continue.

The tiny Llama trains 6 AdamW steps fully sharded (FSDP over every rank); a ``CheckpointManager`` saves
every 3 steps asynchronously (staged to host memory, written in the background while training goes on,
``latest`` moved only once a checkpoint is durable). Then a
tensor-parallel copy with fresh weights and a fresh optimizer loads the checkpoint of step 3 — every parameter and
AdamW state resharded from FSDP's row shards to TP's column/row shards while reading — and trains steps
4-6 on the same batches. Both loss curves are printed; they agree to float32 rounding (the two layouts
sum in different orders).
"""
from __future__ import annotations

import shutil
import tempfile
import time

import torch
import torch.distributed as dist

import hyper_parallel as hp
from hyper_parallel import checkpoint as ckpt
from hyper_parallel.checkpoint.cli import summarize
from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama

STEPS, SAVE_AT = 6, 3


def _batch(step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, TINY_CONFIGS["debug"].vocab_size, (4, 32), generator=gen)


def _step(model, opt, ids) -> torch.Tensor:
    loss = LlamaForCausalLM.loss(model(ids)[:, :-1], ids[:, 1:])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def _fsdp_run(mesh, folder: str):
    """FSDP training, saved every 3 steps asynchronously. Returns (losses, seconds the first save blocked)."""
    rank, world = dist.get_rank(), mesh.size()
    torch.manual_seed(0)
    model = LlamaForCausalLM(TINY_CONFIGS["debug"])
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh)
    hp.fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    manager = ckpt.CheckpointManager(folder, interval=SAVE_AT, keep_latest_k=2, async_mode="async",
                                     states={"model": ckpt.ModelState(model), "optim": ckpt.OptimizerState(model, opt)})
    losses, blocked = [], 0.0
    for step in range(1, STEPS + 1):
        loss = _step(model, opt, _batch(step).chunk(world)[rank])
        dist.all_reduce(loss)
        losses.append(loss.item() / world)
        start = time.perf_counter()
        if manager.save(step) and step == SAVE_AT:
            blocked = time.perf_counter() - start
    manager.close()
    return losses, blocked


def _tp_resume(mesh, folder: str):
    """A TP model with other weights loads the FSDP checkpoint and trains the remaining steps."""
    tp_mesh = hp.init_device_mesh("cpu", (mesh.size(),), mesh_dim_names=("tp",))
    torch.manual_seed(123)
    model = parallelize_llama(LlamaForCausalLM(TINY_CONFIGS["debug"]), tp_mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    manager = ckpt.CheckpointManager(folder, interval=SAVE_AT, keep_latest_k=2,
                                     states={"model": ckpt.ModelState(model), "optim": ckpt.OptimizerState(model, opt)})
    assert manager.latest_step() == STEPS
    start = manager.load(step=SAVE_AT)
    losses = [_step(model, opt, _batch(step)).item() for step in range(start + 1, STEPS + 1)]
    return start, losses


def checkpoint_section(mesh) -> bool:
    """Train with FSDP saving step 3, resume from it with TP; print both curves; True when they agree."""
    box = [tempfile.mkdtemp(prefix="hp_demo_ckpt_") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    folder = box[0]
    try:
        fsdp_losses, blocked = _fsdp_run(mesh, folder)
        start, tp_losses = _tp_resume(mesh, folder)
        info = summarize(f"{folder}/step-{start:08d}") if dist.get_rank() == 0 else None
    finally:
        dist.barrier()
        if dist.get_rank() == 0:
            shutil.rmtree(folder, ignore_errors=True)
    diffs = [abs(a - b) for a, b in zip(fsdp_losses[start:], tp_losses)]
    ok = start == SAVE_AT and len(tp_losses) == STEPS - SAVE_AT and max(diffs) <= 1e-4
    if dist.get_rank() == 0:
        print(f"\n== checkpoint: FSDP training saved every {SAVE_AT} steps (async), a TP model resumes from step "
              f"{SAVE_AT} ==")
        print(f"checkpoint of step {start}: {len(info['tensors'])} tensors, {info['total_bytes']:,} bytes in "
              f"{len(info['files'])} files; the async save blocked training {blocked * 1e3:.1f} ms")
        print("step  FSDP loss   TP loss (resumed)  |diff|")
        for step, loss in enumerate(fsdp_losses, 1):
            resumed = tp_losses[step - start - 1] if step > start else None
            row = f"{step:<5} {loss:<11.6f} "
            row += f"{resumed:<18.6f} {abs(resumed - loss):.1e}" if resumed is not None else "(before the save)"
            print(row)
        print("the resumed TP run continues the FSDP run" if ok else "RESUMED RUN DIFFERS")
    return ok
