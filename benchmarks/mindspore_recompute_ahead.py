# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: when a MindSpore pipeline stage recomputes (2 CPU ranks, mccl, 1F1B).

A MindSpore ``PipelineStage`` recomputes each microbatch's forward in its backward (``mindspore.vjp``). By default
that happens in the B step, after the output gradient's receive returned; with ``recompute_ahead=True`` the first
stage recomputes right before it blocks on that receive, while the last stage is still computing (RiPipe's
"recompute in the bubble"). Each stage is ``L`` layers of ``tanh(Dense(H, H))``, ``M`` microbatches of ``B`` rows.
Both modes run on the same stages in interleaved rounds, the order alternating (``stage.recompute_ahead``
toggled between steps); printed:
the median step time of each and their ratio (the slowest rank's time per step), and whether the weight gradients
are equal.

    python benchmarks/mindspore_recompute_ahead.py [--layers 4] [--hidden 512] [--rows 64] [--micro 4] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def run() -> dict:
    """One rank of the launch (arguments in ``HP_BENCH_ARGS``): the timings of both modes."""
    import numpy as np
    import mindspore as ms
    from mindspore import nn, ops
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    args = json.loads(os.environ["HP_BENCH_ARGS"])
    ms.set_context(mode=ms.PYNATIVE_MODE)
    hp.init_device_mesh("cpu", (2,), platform="mindspore")
    plat = hp.get_platform("mindspore")
    rank = plat.get_rank()
    ms.set_seed(rank)
    hidden = args["hidden"]
    layers = [nn.Dense(hidden, hidden) for _ in range(args["layers"])]

    class Stage(nn.Cell):
        """``layers`` x tanh(dense)."""

        def __init__(self):
            super().__init__()
            self.layers = nn.CellList(layers)

        def construct(self, x):
            """The layers in order."""
            for layer in self.layers:
                x = ops.tanh(layer(x))
            return x

    stage = pp.PipelineStage(Stage(), rank, 2)  # the MindSpore stage  # pylint: disable=no-member
    sched = pp.Schedule1F1B(stage, args["micro"], loss_fn=lambda out, y: ((out - y) ** 2).mean())
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((args["rows"] * args["micro"], hidden)).astype(np.float32))
    y = ms.Tensor(rng.standard_normal((args["rows"] * args["micro"], hidden)).astype(np.float32))

    def step(ahead: bool):
        stage.recompute_ahead = ahead
        stage.zero_grad()  # pylint: disable=no-member
        plat.barrier()
        start = time.perf_counter()
        sched.step(x if rank == 0 else None, target=y if rank == 1 else None)
        return time.perf_counter() - start, [g.asnumpy() for g in stage.grads()]  # pylint: disable=no-member

    for ahead in (False, True):  # warm-up (shape inference, kernels)
        step(ahead)
    times = {"after receive": [], "ahead": []}
    grads = {}
    for i in range(args["rounds"]):  # the order alternates round by round
        for name, ahead in (("after receive", False), ("ahead", True))[::1 if i % 2 == 0 else -1]:
            seconds, grads[name] = step(ahead)
            times[name].append(seconds)
    equal = all(np.array_equal(a, b) for a, b in zip(grads["after receive"], grads["ahead"]))
    return {"times": times, "equal": bool(equal),
            "recomputed_ahead": stage.recomputed_ahead}  # pylint: disable=no-member


def main(argv=None) -> None:
    """Launch 2 MindSpore ranks, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from hyper_parallel.testing.mindspore_launch import launch  # pylint: disable=import-outside-toplevel
    res = launch("benchmarks.mindspore_recompute_ahead:run", world_size=2, timeout=900,
                 env={"HP_BENCH_ARGS": json.dumps(vars(args))})
    per_step = {name: [max(r["times"][name][i] for r in res) for i in range(args.rounds)]
                for name in ("after receive", "ahead")}
    med = {name: statistics.median(v) for name, v in per_step.items()}
    load = os.getloadavg()[0]
    print(f"1F1B, 2 MindSpore ranks, {args.layers} x Dense({args.hidden}) per stage, {args.micro} microbatches of "
          f"{args.rows} rows, {args.rounds} interleaved rounds, load {load:.1f}")
    print("| recompute | median step (s) | all rounds (s) |\n|---|---|---|")
    for name, values in per_step.items():
        print(f"| {name} | {med[name]:.3f} | {', '.join(f'{v:.3f}' for v in values)} |")
    print(f"ahead / after receive: {med['ahead'] / med['after receive']:.2f}x; gradients equal: "
          f"{all(r['equal'] for r in res)}; microbatches recomputed ahead (rank 0): {res[0]['recomputed_ahead']}")


if __name__ == "__main__":
    main()
