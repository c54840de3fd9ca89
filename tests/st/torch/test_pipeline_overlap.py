# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (2 gloo ranks): ``overlap_b_f`` — one microbatch's forward and another's backward on two threads.

* Interleaved1F1B, DualPipeV and 1F1B with ``overlap_b_f=True`` train 3 SGD steps (2 accumulated
  ``step()`` calls each) and match one process: losses, every gradient, every parameter (the
  ``run_parity`` harness of ``test_pipeline.py``), on the MLP blocks and on blocks holding a MoE layer
  (4 experts top-2 plus a shared expert): PP with MoE and overlap.
* The pairs really run on two threads (the backward half on ``hp-pp-backward``), the duplex P2P batches
  carry sends and receives together, and a ``torch.profiler`` chrome trace of one step shows forward
  and backward intervals of different threads intersecting (measured from the trace by
  ``hyper_parallel.devtools.trace_overlap``), with the same run without the knob as the control (no
  two compute intervals of different threads ever intersect there).
"""
from hyper_parallel.testing import multi_rank

F_RANGES = r"hp\.pp\.compute\.\d+F\d+"
B_RANGES = r"hp\.pp\.compute\.\d+[BI]\d+"


def make_moe_blocks(n, d=16, seed=0):
    """``n`` blocks of ``x + MoE(tanh(lin(x)))`` (4 experts top-2, one shared expert, local experts)."""
    import torch
    from torch import nn
    from hyper_parallel.moe import MoE, MoEConfig

    class Block(nn.Module):
        """A linear layer, then a residual MoE feed-forward."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(d, d)
            self.moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=d, hidden_dim=2 * d, num_shared_experts=1))
            self.moe.reset_parameters(0.2)

        def forward(self, x):
            h = torch.tanh(self.lin(x))
            return h + self.moe(h)

    torch.manual_seed(seed)
    return nn.ModuleList(Block() for _ in range(n))


@multi_rank(world_size=2, timeout=300)
def test_overlap_b_f_matches_one_process():
    import torch.distributed as dist
    from tests.st.torch.test_pipeline import run_parity
    rank = dist.get_rank()
    seen = {}
    for name, m, v in (("Interleaved1F1B", 4, 2), ("DualPipeV", 5, 2), ("1F1B", 4, 1)):
        steps = run_parity(name, m, v, n_rows=2 * m, overlap_b_f=True)
        sched = run_parity.last
        assert sched.overlap_b_f and sched.schedule.name == name
        seen[name] = sum("OVERLAP_F_B" in a for a in steps)
        assert sched.comm_stats["duplex"] >= 1, (name, sched.comm_stats)
    # Interleaved1F1B p=2 m=4: 4 pairs on rank 0 and 2 on rank 1 (list in docs/pipeline.md); DualPipeV's own
    # pairs plus one more; 1F1B pairs its steady state on rank 0 only (the last stage runs F and B of one
    # microbatch back to back)
    assert seen["Interleaved1F1B"] == (4 if rank == 0 else 2), seen
    assert seen["DualPipeV"] >= 5 and (seen["1F1B"] == 3 if rank == 0 else seen["1F1B"] == 0), seen


@multi_rank(world_size=2, timeout=300)
def test_overlap_b_f_with_moe_matches_one_process():
    from tests.st.torch.test_pipeline import run_parity
    for name, m, v in (("Interleaved1F1B", 4, 2), ("DualPipeV", 4, 2)):
        steps = run_parity(name, m, v, n_rows=2 * m, make=make_moe_blocks, d=16, overlap_b_f=True)
        assert any("OVERLAP_F_B" in a for a in steps)


STEPS = 3


def _traced_step(overlap_b_f, tmpdir):
    """``STEPS`` steps of Interleaved1F1B (m=4) on d=256 blocks under torch.profiler; (trace path, the last
    step's leaf timeline)."""
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()
    torch.manual_seed(0)
    d, m = 256, 4
    blocks = [nn.Sequential(*[x for _ in range(3) for x in (nn.Linear(d, d), nn.Tanh())]) for _ in range(4)]
    mine = [s for s in range(4) if s % 2 == rank]
    stages = [pp.PipelineStage(blocks[s], s, 4, "cpu") for s in mine]
    sched = pp.ScheduleInterleaved1F1B(stages, m, loss_fn=nn.functional.mse_loss, overlap_b_f=overlap_b_f,
                                       overlap_p2p=True)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(256 * m, d, generator=g), torch.randn(256 * m, d, generator=g)
    sched.step(x if rank == 0 else None, target=y if rank == 1 else None)  # shape inference, warm-up
    sched.record_timeline = True
    # profile_all_threads: the backward thread's ranges too (by default only the profiling thread's)
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        for _ in range(STEPS):
            sched.step(x if rank == 0 else None, target=y if rank == 1 else None)
    path = os.path.join(tmpdir, f"trace_{int(overlap_b_f)}_{rank}.json")
    prof.export_chrome_trace(path)
    return path, sched.leaf_timeline


@multi_rank(world_size=2, timeout=300)
def test_overlap_b_f_trace_shows_forward_and_backward_intersect():
    import tempfile
    import threading
    import torch.distributed as dist
    from hyper_parallel.devtools.trace_overlap import trace_intervals, trace_overlap
    with tempfile.TemporaryDirectory() as tmp:
        on, leaves_on = _traced_step(True, tmp)
        off, leaves_off = _traced_step(False, tmp)
        both_on = trace_overlap(on, F_RANGES, B_RANGES)
        both_off = trace_overlap(off, F_RANGES, B_RANGES)
        recv_in_flight = trace_overlap(on, r"hp\.comm\.p2p\.recv", r"hp\.pp\.compute\.", different_threads=False)
        n_f, n_b = len(trace_intervals(on, F_RANGES)), len(trace_intervals(on, B_RANGES))
    threads_on = {a.type.value: set() for _, _, a, _ in leaves_on}
    for _, _, a, thread in leaves_on:
        threads_on[a.type.value].add(thread.split("_")[0])
    me = threading.current_thread().name
    assert {t for _, _, _, t in leaves_off} == {me}
    assert "hp-pp-backward" in threads_on["B"] and threads_on["F"] == {me}, threads_on
    assert n_f == 8 * STEPS and n_b == 8 * STEPS, (n_f, n_b)  # 2 stages x 4 microbatches on this rank
    assert both_off.both_us == 0, str(both_off)  # control: one thread, no two compute intervals intersect
    assert recv_in_flight.both_us > 0, str(recv_in_flight)  # receives posted before the compute they overlap
    # the measured intersection is timing: summed over both ranks and 3 steps (18 pairs), it is positive
    # whenever the two threads ever ran at once (on an oversubscribed machine the second thread often
    # gets no core during a ~1 ms forward); the per-rank figure goes to the log
    import torch
    total = torch.tensor([both_on.both_us])
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()}: overlap_b_f trace: {both_on}")
    assert total.item() > 0, str(both_on)


def _on_backward_lane(fn):
    """``fn()`` on a new thread put on the backward lane; returns (result, error text)."""
    import threading
    from hyper_parallel.platform.base import CollectiveError
    from hyper_parallel.platform.torch import lanes
    out = {}

    def work():
        lanes.enter_backward_lane()
        try:
            out["value"] = fn()
        except CollectiveError as exc:
            out["error"] = str(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return out.get("value"), out.get("error", "")


@multi_rank(world_size=2, timeout=120)
def test_backward_lane_collective_needs_a_twin_group():
    import torch
    import torch.distributed as dist
    from hyper_parallel.platform import get_platform
    from hyper_parallel.platform.torch import lanes
    plat = get_platform("torch")
    group = dist.new_group([0, 1])
    x = torch.full((3,), float(dist.get_rank() + 1))
    _, error = _on_backward_lane(lambda: plat.all_reduce(x, "sum", group))
    assert "ranks [0, 1]" in error and "has no twin" in error, error
    assert lanes.add_twin_groups([group]) == 1 and lanes.add_twin_groups([group]) == 0
    value, error = _on_backward_lane(lambda: plat.all_reduce(x, "sum", group))
    assert not error and torch.equal(value, torch.full((3,), 3.0))
    assert lanes.lane_group(group) is group  # the calling thread stays on the group itself
