# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step time of MindSpore TP 2 with ``training.compile`` (one ``mindspore.jit`` graph over each rank's shards,
``hyper_parallel.tp._mindspore.compiled``) against TP 2 in PyNative (DTensor dispatch op by op), both ours.

    python benchmarks/ms_tp_compile.py [--steps 12] [--seq 64] [--batch 8] [--sequence-parallel true|false]

One launch of 2 MindSpore ranks; in each rank two ``LLMTrainer`` s of the same config (llama3 ``debug``, ``tp = 2``,
``dp_shard = 1``, one intra-op thread), one PyNative and one compiled, run step by step in turn (after a barrier
each), so both see the same machine load. A step time is ``train_step`` 's ``step_s`` (data, forward, backward,
clipping, optimizer); medians without the first two steps (compilation / warm-up), ratio = PyNative / compiled per
step. Also, in turn with them, ``plain-ms-jit-half``: plain MindSpore's whole-step jit (forward, backward and
``nn.AdamWeightDecay`` in one graph, no hyper_parallel layer) of the whole model on half the batch -- the same
FLOPs per rank as a TP 2 rank, without collectives (plain MindSpore has no tensor parallel on CPU: its
semi-auto parallel refuses the CPU backend); ratio ``compiled / plain``. The load average is printed before and
after."""
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
ENV = "HP_BENCH_MS_TP_COMPILE"


def _trainer(a: Dict[str, object], compile_: bool):
    from hyper_parallel.trainer.api import LLMTrainer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    over = [("job.backend", "mindspore"), ("job.nproc", 2), ("job.threads", 1), ("parallelism.tp", 2),
            ("parallelism.dp_shard", 1), ("parallelism.dp_replicate", 1),
            ("parallelism.sequence_parallel", a["sp"]), ("training.compile", compile_),
            ("training.seq_len", a["seq"]), ("training.global_batch", a["batch"]), ("training.steps", a["steps"]),
            ("metrics.progress", False), ("metrics.plot", False), ("checkpoint.enable", False),
            ("job.out_dir", tempfile.mkdtemp(prefix="hp_bench_tp_jit_"))]
    trainer = LLMTrainer(load_config(a["config"], over), distributed=True)
    trainer.setup()
    return trainer


def worker() -> Dict[str, object]:
    """One of 2 MindSpore ranks: the PyNative and the compiled TP trainer, a step of each in turn."""
    a = json.loads(os.environ[ENV])
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from benchmarks.backends import _batches, _plain_ms_step  # pylint: disable=import-outside-toplevel
    trainers = {"ours-ms-tp2": _trainer(a, False), "ours-ms-tp2-jit": _trainer(a, True)}
    plain = _plain_ms_step(True, int(a["seq"]))
    halves = _batches(int(a["batch"]) // 2, int(a["seq"]), int(a["steps"]))
    times: Dict[str, List[float]] = {k: [] for k in (*trainers, "plain-ms-jit-half")}
    losses: Dict[str, List[float]] = {k: [] for k in trainers}
    try:
        for i in range(int(a["steps"])):
            for name, trainer in trainers.items():
                trainer.backend.barrier()
                out = trainer.train_step(i + 1)
                times[name].append(out["step_s"])
                losses[name].append(out["loss"])
            trainers["ours-ms-tp2"].backend.barrier()
            start = time.perf_counter()
            float(plain(ms.Tensor(halves[i][:, :-1]), ms.Tensor(halves[i][:, 1:])).asnumpy())
            times["plain-ms-jit-half"].append(time.perf_counter() - start)
    finally:
        for trainer in trainers.values():
            trainer.close()
    (slow, fast) = trainers
    ratios = [s / f for s, f in zip(times[slow][2:], times[fast][2:])]
    vs_plain = [f / p for f, p in zip(times[fast][2:], times["plain-ms-jit-half"][2:])]
    return {"times_ms": {k: [round(t * 1000, 1) for t in v] for k, v in times.items()},
            "median_ms": {k: round(statistics.median(v[2:]) * 1000, 1) for k, v in times.items()},
            "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "jit_vs_plain_half_median": round(statistics.median(vs_plain), 3),
            "jit_vs_plain_half_min_max": [round(min(vs_plain), 3), round(max(vs_plain), 3)],
            "max_loss_diff": max(abs(x - y) for x, y in zip(losses[slow], losses[fast])),
            "load": round(os.getloadavg()[0], 1)}


def main() -> None:
    """Launch :func:`worker` on 2 ranks and print its per-rank results (JSON) with the load around it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "mindspore_tp_fsdp.toml"))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--sequence-parallel", default="true", choices=("true", "false"))
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    from hyper_parallel.testing.mindspore_launch import launch  # pylint: disable=import-outside-toplevel
    env = {ENV: json.dumps({"batch": args.batch, "seq": args.seq, "steps": args.steps, "config": args.config,
                            "sp": args.sequence_parallel == "true"}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
           "OMP_NUM_THREADS": "1"}
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    ranks = launch("benchmarks.ms_tp_compile:worker", world_size=2, timeout=args.timeout, env=env)
    print("after: ", subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    print(json.dumps(ranks, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
