# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The fixed cost of an ``hp-train`` launch, by phase: a 2-rank Llama 3 ``debug`` run of 3 steps with a final
checkpoint (the composition matrix's run), timed from the outside by the lines it prints.

    python benchmarks/hp_train_launch.py [--rounds 2] [--before /path/to/other/checkout]

Phases (seconds since start): ``parent_exec`` (the launching hp-train validated the config and execs torchrun),
``torchrun_up`` (the agent's first line), ``banner`` (the ranks imported torch and set up), ``steps_done``, ``exit``
(the ranks closed and the agent ended). With ``--before DIR`` rounds interleave that tree (put first on
``PYTHONPATH``, e.g. ``git worktree add DIR main``) with this one, so load hits both alike. Not a test.
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

ARGS = ["--model.name", "llama3", "--model.flavor", "debug", "--training.global_batch", "8", "--training.seq_len", "32",
        "--data.max_corpus_mb", "0.3", "--data.vocab_size", "1024", "--metrics.progress", "false", "--metrics.plot",
        "false", "--metrics.eval_every", "0", "--parallelism.dp_shard", "2", "--job.nproc", "2", "--training.steps",
        "3", "--checkpoint.enable", "true", "--checkpoint.interval", "3", "--checkpoint.async_mode", "disabled",
        "--checkpoint.resume", "false", "--checkpoint.overwrite", "true"]
MARKS = (("parent_exec", "hp-train: launcher: none"), ("torchrun_up", "OMP_NUM_THREADS"),
         ("banner", " run: "), ("steps_done", "steps 1..3"))


def one(pythonpath: str, work: str) -> dict:
    """One run; the seconds at which each phase's line appeared."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = ["--job.out_dir", os.path.join(work, "run"), "--data.cache_dir", os.path.join(work, "data"),
           "--checkpoint.folder", os.path.join(work, "run", "ckpt")]
    start, marks = time.perf_counter(), {}
    with subprocess.Popen([sys.executable, "-m", "hyper_parallel.trainer.cli", *ARGS, *out], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=work) as proc:
        for line in proc.stdout:
            for name, needle in MARKS:
                if needle in line:
                    marks.setdefault(name, round(time.perf_counter() - start, 2))
        marks["rc"] = proc.wait()
    marks["exit"] = round(time.perf_counter() - start, 2)
    marks["load"] = round(os.getloadavg()[0], 1)
    return marks


def main() -> None:
    """Interleaved rounds; one JSON line per run, then the medians."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--before", default="", help="another checkout to compare with (first on PYTHONPATH)")
    args = p.parse_args()
    trees = ([("before", os.path.abspath(args.before))] if args.before else []) + [("this tree", "")]
    rows = {label: [] for label, _ in trees}
    with tempfile.TemporaryDirectory(prefix="hp_launch_") as work:
        for _ in range(args.rounds):
            for label, path in trees:
                rows[label].append(one(path, work))
                print(json.dumps({"tree": label, **rows[label][-1]}), flush=True)
    for label, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs if k in r) for k in ("parent_exec", "torchrun_up", "banner",
                                                                               "steps_done", "exit", "load")}
        print(f"{label}: median " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
