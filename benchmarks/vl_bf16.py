# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Is a vision-language model's bf16 FSDP row off one process by a real error or by bf16 noise?

The composition matrix compares ``<model> dp_shard=2 mixed_precision=bf16`` with one bf16 process. Both runs
round every autocast matmul to bf16, in different summation orders, so they may drift apart without any bug. This
measures the drift against fp32: it trains the matrix's configuration (``hyper_parallel/trainer/composition.yaml``:
its base, data and steps) four times in-process (the matrix's own runner, :func:`train_in_process`):

* ``fp32 x1``: one process, fp32 (the truth up to fp32 rounding);
* ``bf16 x1``: one process, bf16 autocast;
* ``bf16 fsdp2``: 2 ranks FSDP, bf16 autocast;
* ``fp32 fsdp2``: 2 ranks FSDP, fp32 (the layout itself: must be ~1e-6).

and prints each run's worst per-tensor parameter error (max |a - b| / max |b|, the matrix's measure) and loss
error against ``fp32 x1``, and the two bf16 runs against each other. A layout bug (a cast in the wrong place, a
reduction in bf16) puts ``bf16 fsdp2`` further from fp32 than ``bf16 x1`` is; noise leaves both at the same
distance from fp32, with the bf16-vs-bf16 difference of that size too.

    python benchmarks/vl_bf16.py                  # qwen3_vl (needs runs/vl_data: make vl-demo)
    python benchmarks/vl_bf16.py qwen3_5_vl 5     # another matrix model, 5 steps
"""
from __future__ import annotations

import os
import sys
import tempfile

from hyper_parallel.devtools.composition import _combination, compare, load_table, train_in_process


def _overrides(table, model: str, dims: dict):
    return list(_combination(table, model, dims, {}).overrides)


def _case(*args):
    """One rank's share of a 2-rank run (rank 0 returns the result)."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    run = train_in_process(*args)
    return run if dist.get_rank() == 0 else {}


def main(model: str = "qwen3_vl", steps: int = 0) -> None:
    """Train the four runs and print the table (see the module docstring)."""
    from hyper_parallel.testing.multiprocess import get_pool  # pylint: disable=import-outside-toplevel
    table = load_table()
    steps = steps or table["steps"]
    work = tempfile.mkdtemp(prefix="hp-vl-bf16-")
    cache = os.path.join(work, "data")
    runs = {}
    for name, dims, nproc in (("fp32 x1", {}, 1), ("bf16 x1", {"mixed_precision": "bf16"}, 1),
                              ("bf16 fsdp2", {"mixed_precision": "bf16", "dp_shard": 2}, 2),
                              ("fp32 fsdp2", {"dp_shard": 2}, 2)):
        args = (_overrides(table, model, dims), nproc, os.path.join(work, name.replace(" ", "-")), steps, cache)
        runs[name] = train_in_process(*args) if nproc == 1 else get_pool(2).run(_case, args, timeout=900)[0]
    print(f"\n{model}, {steps} steps, load {os.getloadavg()[0]:.1f}")
    print(f"{'run':<12} {'vs':<10} {'param rel err':>14} {'loss rel err':>13}  worst tensor")
    for name, ref in (("bf16 x1", "fp32 x1"), ("bf16 fsdp2", "fp32 x1"), ("fp32 fsdp2", "fp32 x1"),
                      ("bf16 fsdp2", "bf16 x1")):
        c = compare(runs[name], runs[ref], 1.0)
        print(f"{name:<12} {ref:<10} {c['param_rel_err']:14.2e} {c['loss_rel_err']:13.2e}  {c['worst_param']}")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["qwen3_vl"]), *(int(a) for a in sys.argv[2:3]))
