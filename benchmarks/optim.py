# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: the optimizer step of the sharded Muon vs "every rank orthogonalises everything" vs AdamW.

Model: the tiny Llama ``small`` (4 layers, hidden 256, MLP 688) under ``fully_shard`` (one unit per
decoder layer plus the root) on 2 gloo ranks. The optimized parameters are the hidden matrices
(the default Muon set: 28 matrices, 2.9 M elements); every candidate steps exactly those, with the
same gradients (one backward before timing). Step times are medians of interleaved rounds; the
slowest rank counts.

* ``muon (distributed)``: ``hyper_parallel.optim.Muon`` — each matrix orthogonalised once, by its
  owner (LPT over counted Newton–Schulz FLOPs), bf16 pieces moved by one all-to-all each way.
* ``muon (naive, batched)``: every rank all-gathers every update (bf16) and orthogonalises every
  matrix with the same batched kernel, then keeps its shard — the distribution is the only difference.
* ``muon (naive, per matrix)``: the same, one Newton–Schulz call per matrix (what running
  ``torch.optim.Muon`` on gathered matrices does).
* ``adamw``: ``torch.optim.AdamW`` (foreach) on the same local shards.

Targets (issue #18): distributed Muon <= 0.6x the naive step; Muon step <= 3x the AdamW step.

    python benchmarks/optim.py        # self-launches torchrun with 2 ranks
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ensure_launched, fmt_time, print_table, time_interleaved  # noqa: E402  pylint: disable=wrong-import-position


def _model():
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(TINY_CONFIGS["small"])
    mesh = hp.init_device_mesh("cpu", (2,))
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh)
    hp.fully_shard(model, mesh=mesh)
    return model


def _grads(model):
    import torch
    import torch.distributed as dist
    g = torch.Generator().manual_seed(dist.get_rank())
    ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=g)
    model.loss(model(ids[:, :-1]), ids[:, 1:]).backward()


class NaiveMuon:
    """Muon where every rank gathers every matrix and orthogonalises all of them (the baseline)."""

    def __init__(self, params, lr: float, batched: bool) -> None:
        import torch
        self.params = list(params)
        self.lr = lr
        self.batched = batched
        self.bufs = [None] * len(self.params)
        self._torch = torch

    def step(self) -> None:
        """One step: momentum on local shards, all-gather, NS of every matrix, keep the local shard."""
        torch = self._torch
        from hyper_parallel.optim._torch.muon import _local, _spec_of, adjusted_lr, newton_schulz
        from hyper_parallel.platform.torch.dtensor import DTensor
        with torch.no_grad():
            fulls, locals_ = [], []
            for i, p in enumerate(self.params):
                grad, local = _local(p.grad), _local(p)
                if self.bufs[i] is None:
                    self.bufs[i] = torch.zeros_like(grad)
                self.bufs[i].lerp_(grad, 0.05)
                upd = grad.lerp(self.bufs[i], 0.95).bfloat16()
                spec = _spec_of(p)
                fulls.append(DTensor.from_local(upd, spec.mesh, spec.placements, shape=spec.shape).full_tensor())
                locals_.append((local, spec))
            outs = self._ns(fulls, newton_schulz)
            for (local, spec), full in zip(locals_, outs):
                shape, offset = spec.local_shape_and_offset(spec.mesh.get_coordinate())
                piece = full.narrow(0, offset[0], shape[0])
                local.add_(piece, alpha=-adjusted_lr(self.lr, "match_rms_adamw", *spec.shape))

    def _ns(self, fulls, newton_schulz):
        if not self.batched:
            return [newton_schulz(f.unsqueeze(0))[0] for f in fulls]
        by_shape = {}
        for i, f in enumerate(fulls):
            by_shape.setdefault(tuple(f.shape), []).append(i)
        out = [None] * len(fulls)
        for idx in by_shape.values():
            done = newton_schulz(self._torch.stack([fulls[i] for i in idx]))
            for j, i in enumerate(idx):
                out[i] = done[j]
        return out


def main() -> None:
    """Time the four optimizer steps and print the table and the ratios."""
    import torch
    import torch.distributed as dist
    from hyper_parallel.optim._torch.muon import Muon
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    model = _model()
    _grads(model)
    mats = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n and "lm_head" not in n]
    muon = Muon(mats, lr=2e-3)
    naive = NaiveMuon(mats, 2e-3, batched=True)
    naive_each = NaiveMuon(mats, 2e-3, batched=False)
    adamw = torch.optim.AdamW(mats, lr=2e-3, foreach=True)
    times = time_interleaved({"muon (distributed)": muon.step, "muon (naive, batched)": naive.step,
                              "muon (naive, per matrix)": naive_each.step, "adamw": adamw.step},
                             iters=1, warmup=1, rounds=int(os.environ.get("HP_BENCH_ROUNDS", "5")))
    stats = muon.last_step_stats
    flops = torch.tensor([stats["flops"]], dtype=torch.float64)
    all_flops = [torch.zeros_like(flops) for _ in range(dist.get_world_size())]
    dist.all_gather(all_flops, flops)
    total_elems = sum(p.numel() for p in mats)
    rows = [[name, fmt_time(t), f"{t / times['muon (naive, batched)']:.2f}x", f"{t / times['adamw']:.1f}x"]
            for name, t in times.items()]
    print_table(f"optimizer step, tiny Llama 'small' under fully_shard, 2 ranks ({len(mats)} matrices, "
                f"{total_elems / 1e6:.1f} M elements)", rows, ["optimizer", "step", "vs naive batched", "vs AdamW"])
    if dist.get_rank() == 0:
        per_rank = [int(f.item()) for f in all_flops]
        mean = sum(per_rank) / len(per_rank)
        ratio = times["muon (distributed)"] / times["muon (naive, batched)"]
        ratio_each = times["muon (distributed)"] / times["muon (naive, per matrix)"]
        vs_adamw = times["muon (distributed)"] / times["adamw"]
        print(f"Newton-Schulz GFLOP per rank per step: {[round(f / 1e9, 2) for f in per_rank]} "
              f"(naive: {sum(per_rank) / 1e9:.2f} on every rank); max/mean {max(per_rank) / mean:.3f}")
        print(f"bytes sent per rank per step (distributed): {stats['sent_bytes'] / 1e6:.2f} MB")
        print(f"distributed / naive batched = {ratio:.2f}x (target <= 0.6x: {'met' if ratio <= 0.6 else 'NOT met'})")
        print(f"distributed / naive per matrix = {ratio_each:.2f}x")
        print(f"Muon / AdamW step = {vs_adamw:.1f}x (target <= 3x: {'met' if vs_adamw <= 3 else 'NOT met'})")
        print(f"load average before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f} "
              f"({os.cpu_count()} cores)")


if __name__ == "__main__":
    ensure_launched(2)
    main()
