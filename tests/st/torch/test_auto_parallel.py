# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: auto-parallel's peak-memory estimate against the measured peak (CI subset of
``benchmarks/auto_parallel_validate.py``): FSDP and a 1F1B pipeline on 2 gloo ranks and recomputation on
one process, the tiny Llama trained AdamW steps each; the busiest rank's peak tracked memory in the
steady-state steps (``AllocationTracker(by_pointer=True)``: allocation events replayed by address, which
does not depend on when gloo's worker threads release a collective's buffers) must be within 10 % of
``estimate_memory`` (with ``comm_staging``: gloo stages all-gather outputs). Step times are not asserted
(no timing assertions in tests).
"""
from hyper_parallel.testing import multi_rank

TARGET = 0.10


def _check(flavor, plan_kwargs, batch):
    from hyper_parallel.auto_parallel import ParallelPlan, TrainConfig, estimate_memory
    from hyper_parallel.auto_parallel._torch.measure import measure_flavor
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    plan, train = ParallelPlan(**plan_kwargs), TrainConfig(batch, 64)
    got = measure_flavor(flavor, plan, train, tracked_steps=2, timed_steps=1)
    est = estimate_memory(TINY_CONFIGS[flavor], plan, TrainConfig(batch, 64, comm_staging=True))
    measured = max(got["peak_bytes"])
    error = est.peak_bytes / measured - 1
    assert abs(error) <= TARGET, (f"{plan.label()}: estimated {est.peak_bytes} B ({est.components}, peak at "
                                  f"{est.phase}) vs measured {got['peak_bytes']} B: {100 * error:+.1f} %")


@multi_rank(world_size=2, timeout=240)
def test_pipeline_1f1b_memory_estimate_within_target():
    """PP over 2 ranks, 1F1B with 4 microbatches: stage 0 holds 2 microbatches' activations next to its
    gradients in the steady state."""
    _check("small", {"pp": 2, "microbatches": 4}, 8)


@multi_rank(world_size=2, timeout=240)
def test_fsdp_memory_estimate_within_target():
    """FSDP over 2 ranks: the root and the layer units gathered, the prefetched unit, full-size gradients
    packed for their all-reduce while the unit above's is still in flight."""
    _check("small", {"dp_shard": 2}, 8)


@multi_rank(world_size=1, timeout=240)
def test_one_process_recompute_memory_estimate_within_target():
    """One process, full recomputation of every decoder layer: the peak moves to the optimizer step."""
    _check("small", {"activation": "full"}, 4)
