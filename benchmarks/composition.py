# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Composition layouts torch can express with its own APIs: our ``hp-train`` step time over torch's, 2 CPU ranks.

    python benchmarks/composition.py [--rounds 5] [--steps 3] [--seq 128] [--batch 8] [--only fsdp,tp,pp,cp]
    python benchmarks/composition.py --model qwen3_5 --only fsdp,tp     # Qwen3.5 debug (issue 36)

For each layout of the composition matrix that torch expresses with its own APIs -- FSDP2 (``fully_shard``), TP
(``torch.distributed.tensor.parallel``), pipelining (``torch.distributed.pipelining``, 1F1B) and CP
(``torch.distributed.tensor.experimental.context_parallel``) -- the same ``small`` Llama (same class, init and
batches) trains with ``hyper_parallel.trainer.LLMTrainer`` (``ours``) and with a plain torch loop on torch's API
(AdamW, gradient clipping, the same global batch). Rounds interleave (ours, then torch, ``--steps`` steps each)
so machine noise hits both alike; printed: the median step time of each and ours / torch (below 1.0: we are
faster). A layout torch cannot run here is printed with torch's error instead of a ratio. Not a test: no timing
is asserted. Under PP torch's loop clips by the gradient norm over both stages (TorchTitan's ``clip_grad_norm_``
under PP, what one process and our trainer compute); clipping each stage by its own norm skipped that all-reduce
and read 1.22 instead of 0.85. Last run (load 32, 5 rounds of 3 steps): FSDP 0.66, TP 0.75, PP 0.85; CP: torch
cannot (CPU SDPA). The table is in docs/parallelism.md (the results' ``benchmark`` entry).
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

#: layout -> the trainer's [parallelism] overrides (2 ranks)
LAYOUTS = {
    "fsdp": {"dp_shard": 2},
    "tp": {"dp_shard": 1, "tp": 2, "sequence_parallel": False},
    "pp": {"dp_shard": 1, "pp": 2, "pp_schedule": "1F1B", "pp_microbatches": 2},
    "cp": {"dp_shard": 1, "cp": 2, "cp_method": "ring", "cp_load_balance": "none"},
}


def _ours(args, layout):
    from hyper_parallel.trainer.api import LLMTrainer
    from hyper_parallel.trainer.config import load_config
    over = [("model.name", args.model), ("model.flavor", args.flavor), ("job.nproc", 2), ("training.steps", 10_000),
            ("training.global_batch", args.batch), ("training.seq_len", args.seq), ("training.clip_grad_norm", 1.0),
            ("optimizer.lr", 1e-3), ("metrics.progress", False), ("metrics.jsonl", False), ("metrics.plot", False),
            ("metrics.moe_monitor", False), ("metrics.log_every", 100_000),
            ("job.out_dir", f"/tmp/hp_bench_composition_{layout}")]
    over += [(f"parallelism.{k}", v) for k, v in LAYOUTS[layout].items()]
    trainer = LLMTrainer(load_config(None, over))
    trainer.setup()
    return trainer


def _model(args, trainer):
    """A fresh unsharded model of the benchmarked family with the trainer's config (seed 0) for torch's APIs."""
    from hyper_parallel.models import get_model_spec
    torch.manual_seed(0)
    model = trainer.backend.model
    return get_model_spec(args.model).model_cls((model[0] if isinstance(model, list) else model).config)


def _clip(params, max_norm, stages_group=None):
    """``clip_grad_norm_`` over a mix of DTensor (TP-sharded) and plain (replicated) gradients, which torch's own
    ``clip_grad_norm_`` refuses (``_foreach_norm`` got mixed torch.Tensor and DTensor). ``stages_group``: the
    pipeline's ranks, whose squared norms are summed (TorchTitan's ``clip_grad_norm_`` under PP: the norm of the
    whole model, as one process and our trainer clip by), not each stage's own."""
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in params if p.grad is not None]
    norms = [g.norm() for g in grads]
    norms = [n.full_tensor() if isinstance(n, DTensor) else n for n in norms]
    total = torch.stack(norms).norm()
    if stages_group is not None:
        total = total.pow(2)
        dist.all_reduce(total, group=stages_group)
        total = total.sqrt()
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)


def _loop(params_of, forward_loss, loader, stages_group=None):
    """A TorchTitan-style step over torch-parallelised modules: AdamW, clip (over every stage under PP), step."""
    params = list(params_of())
    opt = torch.optim.AdamW(params, lr=1e-3)

    def step():
        loss = forward_loss(torch.tensor(loader.next_batch(), dtype=torch.long))
        _clip(params, 1.0, stages_group)
        opt.step()
        opt.zero_grad()
        return loss
    return step


def _torch_fsdp(model, loader, _args):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (2,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    def fwd(batch):
        loss = type(model).loss(model(batch[:, :-1]).float(), batch[:, 1:])
        loss.backward()
        return loss
    return _loop(model.parameters, fwd, loader)


def _no_torch_baseline(args, layout):
    """Why torch's own API has no baseline for ``layout`` of ``args.model`` here ('' when it has one): the TP plan
    below is Llama's q/k/v/o + MLP plan (Qwen3.5's per-head ``A_log`` / ``dt_bias`` and conv channels need our
    own styles)."""
    if layout == "tp" and args.model != "llama3":
        return f"no torch TP plan for {args.model} (Llama's q/k/v/o + MLP plan only)"
    return ""


def _torch_tp(model, loader, _args):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (2,))
    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Replicate())}
    for i in range(len(model.model.layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)

    def fwd(batch):
        loss = type(model).loss(model(batch[:, :-1]).float(), batch[:, 1:])
        loss.backward()
        return loss
    return _loop(model.parameters, fwd, loader)


def _torch_pp(model, loader, _args):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    rank = dist.get_rank()
    n = len(model.model.layers)
    keep = range(0, n // 2) if rank == 0 else range(n // 2, n)
    model.model.layers = torch.nn.ModuleDict({str(i): model.model.layers[i] for i in keep})
    if rank == 0:
        model.model.norm, model.lm_head = None, None
    else:
        model.model.embed_tokens = None
    stage = PipelineStage(model, rank, 2, torch.device("cpu"))
    sched = Schedule1F1B(stage, n_microbatches=2, loss_fn=lambda out, tgt: type(model).loss(out.float(), tgt))

    def fwd(batch):
        losses = []
        if rank == 0:
            sched.step(batch[:, :-1])
        else:
            sched.step(target=batch[:, 1:], losses=losses)
        return losses
    return _loop(model.parameters, fwd, loader, stages_group=dist.group.WORLD)


def _torch_cp(model, loader, _args):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    mesh = init_device_mesh("cpu", (2,))

    def fwd(batch):
        ids, labels = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        pos = torch.arange(ids.shape[1])
        with context_parallel(mesh, buffers=[ids, labels, pos], buffer_seq_dims=[1, 1, 0]):
            loss = type(model).loss(model(ids, position_ids=pos).float(), labels)
            loss.backward()
        return loss
    return _loop(model.parameters, fwd, loader)


TORCH = {"fsdp": _torch_fsdp, "tp": _torch_tp, "pp": _torch_pp, "cp": _torch_cp}


def _time(fn, steps):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def _bench(args, layout):
    """Median step seconds (ours, torch) over interleaved rounds, or (ours, error text)."""
    from hyper_parallel.trainer.data import DistributedBatchLoader
    trainer = _ours(args, layout)
    dp = 2 if layout == "fsdp" else 1
    loader = DistributedBatchLoader(trainer.dataset, args.batch, dp_rank=dist.get_rank() % dp, dp_size=dp, seed=0)
    counter = [0]

    def ours():
        counter[0] += 1
        trainer.train_step(counter[0])
    why = _no_torch_baseline(args, layout)
    if why:
        return _time(ours, args.steps), why
    try:
        theirs = TORCH[layout](_model(args, trainer), loader, args)
        for _ in range(2):
            ours()
            theirs()
    except Exception as exc:  # pylint: disable=broad-except  # torch cannot run this layout here: say why
        return _time(ours, args.steps), f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    ours_t, theirs_t = [], []
    for _ in range(args.rounds):
        ours_t.append(_time(ours, args.steps))
        theirs_t.append(_time(theirs, args.steps))
    return statistics.median(ours_t), statistics.median(theirs_t)


def main() -> None:
    """Every layout, interleaved rounds; the table on rank 0."""
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--only", default=",".join(LAYOUTS))
    p.add_argument("--model", default="llama3", help="a registry model (qwen3_5: FSDP against torch's FSDP2; TP ours "
                                                        "only, torch's plan styles cannot shard Gated DeltaNet)")
    p.add_argument("--flavor", default=None, help="default: small for llama3, debug otherwise")
    args = p.parse_args()
    args.flavor = args.flavor or ("small" if args.model == "llama3" else "debug")
    ensure_launched(2)
    rows = []
    for layout in args.only.split(","):
        ours, theirs = _bench(args, layout)
        if isinstance(theirs, str):
            rows.append((layout, f"{ours * 1e3:.0f} ms", "-", f"torch: {theirs}"))
        else:
            rows.append((layout, f"{ours * 1e3:.0f} ms", f"{theirs * 1e3:.0f} ms", f"{ours / theirs:.2f}"))
    load = os.getloadavg()
    print_table(f"composition: {args.model} {args.flavor}, 2 ranks, batch {args.batch} x seq {args.seq}, "
                f"{args.rounds} interleaved rounds of {args.steps} steps (load avg {load[0]:.1f} {load[1]:.1f} "
                f"{load[2]:.1f})", rows,
                ("layout", "ours (median step)", "torch (median step)", "ours / torch"))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
