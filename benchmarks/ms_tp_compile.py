# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step time of MindSpore TP 2 with ``training.compile`` (one ``mindspore.jit`` graph over each rank's shards,
``hyper_parallel.tp._mindspore.compiled``) against TP 2 in PyNative (DTensor dispatch op by op), both ours.

    python benchmarks/ms_tp_compile.py [--steps 12] [--seq 64] [--batch 8] [--sequence-parallel true|false]

One launch of 2 MindSpore ranks (llama3 ``debug``, ``tp = 2``, ``dp_shard = 1``, one intra-op thread). First the
compiled trainer, each step (``train_step`` 's ``step_s``: data, forward, backward, clipping, optimizer) followed,
after a barrier each, by: ``plain-ms-jit-half`` -- plain MindSpore's whole-step jit (forward, backward and
``nn.AdamWeightDecay`` in one graph, no hyper_parallel layer) of the whole model on half of the same rows: the
same FLOPs per rank as a TP 2 rank, without collectives (plain MindSpore has no tensor parallel on CPU: its
semi-auto parallel refuses the CPU backend); ``collectives`` -- one jit graph of the collectives the compiled
step runs (counted by running its twin once in PyNative), in order, on tensors of their shapes; ``graph-only``
-- the compiled forward + backward graph alone on the same rows. The floor is plain + collectives; ratios per
step, medians without the first two steps. Then the PyNative TP trainer's steps on their own (the ratio
PyNative / compiled of the medians). The load average is printed before and after."""
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


def _recording(trainer) -> List[List[List[int]]]:
    """The rows ``trainer`` 's loader hands out, recorded as it trains (its ``next_batch`` wrapped): the other
    rows of the benchmark train on the same tokens -- the step time depends on them (on this model random tokens
    ran the same graph ~1.6x faster than the corpus's)."""
    seen: List[List[List[int]]] = []
    loader = trainer.loader
    take = loader.next_batch

    def next_batch():
        seen.append(take())
        return seen[-1]

    loader.next_batch = next_batch
    return seen


def _count_collectives(trainer, ids, labels) -> List[tuple]:
    """``(kind, shape, dtype)`` of every collective one compiled TP step runs, forward and backward: the
    trainer's local twin run once more in PyNative (the same cells: their ``construct`` and custom ``bprop``
    run in Python there) with ``ops.AllReduce`` / ``ops.AllGather`` calls recorded."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore import ops  # pylint: disable=import-outside-toplevel
    fn = trainer.backend._grad_fn  # pylint: disable=protected-access
    twin = fn._fns[int(ids.shape[1])][0]  # pylint: disable=protected-access  # built by the first compiled step
    seen: List[tuple] = []
    originals = {cls: cls.__call__ for cls in (ops.AllReduce, ops.AllGather)}
    for cls, orig in originals.items():
        def counting(prim, x, _orig=orig, _kind=cls.__name__):
            seen.append((_kind, tuple(x.shape), x.dtype))
            return _orig(prim, x)
        cls.__call__ = counting
    try:
        def loss(i, l):  # a def: value_and_grad of the twin in PyNative
            return twin(i, l)
        ms.value_and_grad(loss, None, fn.params)(ids, labels)
    finally:
        for cls, orig in originals.items():
            cls.__call__ = orig
    return seen


def _collectives_graph(seen: List[tuple]):
    """One ``mindspore.jit`` graph running the ``seen`` collectives in order, each on a tensor of its shape (a
    chain: each waits for the one before, as in the step's graph) -- plain MindSpore's cost of TP's
    communication."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore import mint, ops  # pylint: disable=import-outside-toplevel
    prims = {"AllReduce": ops.AllReduce(), "AllGather": ops.AllGather()}
    specs = tuple((prims[k], shape, dtype) for k, shape, dtype in seen)

    def run(x):
        for i in range(len(specs)):  # pylint: disable=consider-using-enumerate  # a loop mindspore.jit unrolls
            prim, shape, dtype = specs[i]
            out = prim(mint.zeros(shape, dtype=dtype) + x.astype(dtype))
            x = mint.narrow(out.reshape(-1), 0, 0, 1).astype(ms.float32) * 0.0
        return x

    return ms.jit(run)


def _timed(barrier, fn) -> float:
    """Seconds of ``fn()`` started after ``barrier()``."""
    barrier()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _compiled_phase(a: Dict[str, object], trainer, times: Dict[str, List[float]]) -> List[tuple]:
    """The compiled trainer's steps, each followed by plain's half-batch step on the same rows, the graph of
    the step's collectives and the compiled graph alone on the same rows; returns the collectives seen."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    from benchmarks.backends import _plain_ms_step  # pylint: disable=import-outside-toplevel
    plain = _plain_ms_step(True, int(a["seq"]))
    rows = _recording(trainer)  # the rows the other rows train on
    barrier, seen, graph = trainer.backend.barrier, [], None
    grad_fn = trainer.backend._grad_fn  # pylint: disable=protected-access
    for i in range(int(a["steps"])):
        barrier()
        out = trainer.train_step(i + 1)
        times["ours-ms-tp2-jit"].append(out["step_s"])
        times["loss-jit"].append(out["loss"])
        full = np.asarray(rows[-1], dtype=np.int32)
        half = full[:len(full) // 2]
        times["plain-ms-jit-half"].append(_timed(barrier, lambda h=half: float(
            plain(ms.Tensor(h[:, :-1]), ms.Tensor(h[:, 1:])).asnumpy())))
        if graph is None:  # after the first compiled step built the twin
            seen = _count_collectives(trainer, ms.Tensor(full[:, :-1]), ms.Tensor(full[:, 1:]))
            graph = _collectives_graph(seen)
        times["collectives"].append(_timed(barrier, lambda: float(graph(ms.Tensor(0.0, ms.float32)).asnumpy())))

        def graph_alone(f=full):
            loss, grads = grad_fn(ms.Tensor(f[:, :-1]), ms.Tensor(f[:, 1:]), ms.Tensor(1.0, ms.float32))
            for g in grads:
                g.asnumpy()
            float(loss.asnumpy())
        times["graph-only"].append(_timed(barrier, graph_alone))
    return seen


def _median_ms(values: List[float]) -> float:
    return round(statistics.median(values[2:]) * 1000, 1)


def worker() -> Dict[str, object]:
    """One of 2 MindSpore ranks: the compiled TP trainer interleaved with plain's rows (``_compiled_phase``),
    then the PyNative TP trainer's steps on their own (a PyNative step slowed the compiled graph that followed it
    by ~1.6x in this process: MindSpore's runtime still busy with it, so the two are not interleaved)."""
    a = json.loads(os.environ[ENV])
    times: Dict[str, List[float]] = {k: [] for k in ("ours-ms-tp2", "ours-ms-tp2-jit", "plain-ms-jit-half",
                                                     "collectives", "graph-only", "loss-jit", "loss")}
    compiled = _trainer(a, True)
    try:
        seen = _compiled_phase(a, compiled, times)
    finally:
        compiled.close()
    eager = _trainer(a, False)
    try:
        for i in range(int(a["steps"])):
            eager.backend.barrier()
            out = eager.train_step(i + 1)
            times["ours-ms-tp2"].append(out["step_s"])
            times["loss"].append(out["loss"])
    finally:
        eager.close()
    jit, plain, comm = times["ours-ms-tp2-jit"][2:], times["plain-ms-jit-half"][2:], times["collectives"][2:]
    vs_plain = [f / p for f, p in zip(jit, plain)]
    vs_floor = [f / (p + c) for f, p, c in zip(jit, plain, comm)]
    return {"median_ms": {k: _median_ms(times[k]) for k in ("ours-ms-tp2", "ours-ms-tp2-jit", "plain-ms-jit-half",
                                                            "collectives", "graph-only")},
            "pynative_vs_jit": round(statistics.median(times["ours-ms-tp2"][2:]) / statistics.median(jit), 3),
            "jit_vs_plain_half_median": round(statistics.median(vs_plain), 3),
            "jit_vs_plain_half_min_max": [round(min(vs_plain), 3), round(max(vs_plain), 3)],
            "step_vs_graph_median": round(statistics.median([f / g for f, g in zip(jit, times["graph-only"][2:])]),
                                          3),
            "collectives_per_step": len(seen),
            "jit_vs_floor_median": round(statistics.median(vs_floor), 3),
            "jit_vs_floor_min_max": [round(min(vs_floor), 3), round(max(vs_floor), 3)],
            "max_loss_diff": max(abs(x - y) for x, y in zip(times["loss"], times["loss-jit"])),
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
    sys.path.insert(0, str(ROOT))  # run as a script: the repository, for benchmarks.backends
    from benchmarks.backends import launch_env  # pylint: disable=import-outside-toplevel
    env = launch_env(ENV, {"batch": args.batch, "seq": args.seq, "steps": args.steps, "config": args.config,
                           "sp": args.sequence_parallel == "true"})
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    ranks = launch("benchmarks.ms_tp_compile:worker", world_size=2, timeout=args.timeout, env=env)
    print("after: ", subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    print(json.dumps(ranks, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
