# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step time of ``hp-train`` on MindSpore vs torch for one config (default ``configs/mindspore_tp_fsdp.toml``:
llama3 debug, TP = 2 x FSDP = 2 on 4 CPU ranks).

    python benchmarks/backends.py [--config FILE] [--rounds 3] [--steps 5] [--seq 64] [--batch 8]

Each round runs ``hp-train`` once per backend (``--job.backend mindspore``: the MindSpore cluster hp-train
launches; ``--job.backend torch``: torchrun), the two alternating so machine noise hits both alike; each run's
step time is the median ``step_s`` of its ``metrics.jsonl`` without the first step (warm-up: kernel
compilation, first collectives). Printed: per round and overall medians, the ratio MindSpore / torch, start-up
wall time per run and the load average before and after. Both runs start from the same weights (the MindSpore
backend takes the torch init of the seed) and train on the same batches.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]


def _run(config: str, backend: str, out: Path, args: argparse.Namespace) -> Dict[str, float]:
    cmd = [sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", config, "--job.backend", backend,
           "--job.out_dir", str(out), "--training.steps", str(args.steps), "--training.seq_len", str(args.seq),
           "--training.global_batch", str(args.batch), "--metrics.progress", "false", "--metrics.plot", "false",
           "--checkpoint.enable", "false"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MS_ROLE")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{backend} run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [r["step_s"] for r in records[1:]] or [r["step_s"] for r in records]
    return {"step_s": statistics.median(steps), "wall_s": wall, "loss": records[-1]["loss"]}


def main() -> None:
    """Interleaved rounds; prints the table and the ratio."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "mindspore_tp_fsdp.toml"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    load_before = os.getloadavg()
    results: Dict[str, List[Dict[str, float]]] = {"mindspore": [], "torch": []}
    with tempfile.TemporaryDirectory(prefix="hp_bench_backends_") as tmp:
        for r in range(args.rounds):
            for backend in ("mindspore", "torch"):
                res = _run(args.config, backend, Path(tmp) / f"{backend}{r}", args)
                results[backend].append(res)
                print(f"round {r + 1}/{args.rounds} {backend:9s}: step {res['step_s'] * 1000:8.1f} ms  run wall "
                      f"{res['wall_s']:6.1f} s  last loss {res['loss']:.4f}", flush=True)
    load_after = os.getloadavg()
    med = {b: statistics.median(x["step_s"] for x in v) for b, v in results.items()}
    wall = {b: statistics.median(x["wall_s"] for x in v) for b, v in results.items()}
    print(f"== hp-train step time, {Path(args.config).name}, {args.steps} steps x {args.rounds} rounds, "
          f"global batch {args.batch} x seq {args.seq} ==")
    for b in ("mindspore", "torch"):
        print(f"{b:9s}  median step {med[b] * 1000:8.1f} ms   median run wall {wall[b]:6.1f} s")
    print(f"ratio MindSpore / torch step time: {med['mindspore'] / med['torch']:.2f}x "
          f"(run wall {wall['mindspore'] / wall['torch']:.2f}x)")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (1-min)")


if __name__ == "__main__":
    main()
