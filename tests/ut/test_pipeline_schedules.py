# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: pipeline schedules as data — generators, validator, simulator, CSV and explain.

For every schedule x p in {2, 4, 8} x m in {1, p-1, p, 2p, 4p} (where the schedule allows m): the lists
validate (deadlock-free global order), the simulated bubble equals the schedule's formula, and the
lists equal torch.distributed.pipelining's ``pipeline_order`` (torch is the oracle, built in-process
on stand-in stage objects: its schedule constructors only read the stage counts)."""
import types

import pytest

from hyper_parallel.pipeline import (MetaStep, MetaStepType, ScheduleConstraintError, ScheduleValidationError,
                                     explain_schedule, generate_schedule, schedule_from_csv, schedule_to_csv,
                                     simulate_schedule, validate_schedule)
from hyper_parallel.pipeline.lowering import add_reduce_grad
from hyper_parallel.pipeline.schedules import SCHEDULES, custom_schedule
from hyper_parallel.pipeline.validate import validate_lists

SINGLE = ("GPipe", "1F1B")
CASES = [(name, p, m) for name in SCHEDULES for p in (2, 4, 8) for m in sorted({1, p - 1, p, 2 * p, 4 * p})]
TORCH_CASES = [c for c in CASES if c[0] != "Mpipe"]  # torch ships no Mpipe
UNIT = {"F": 1.0, "I": 1.0, "W": 1.0}


def _build(name, p, m):
    try:
        return generate_schedule(name, p, m)
    except ScheduleConstraintError as exc:
        return exc


def _allowed(name, p, m):
    return not (name == "DualPipeV" and m < 2 * p)


@pytest.mark.parametrize("name,p,m", CASES)
def test_lists_validate_and_bubble_matches_formula(name, p, m):
    sched = _build(name, p, m)
    if not _allowed(name, p, m):
        assert isinstance(sched, ScheduleConstraintError)
        msg = str(sched)
        assert name in msg and f"n_microbatches={m}" in msg and f"{2 * p} stages" in msg and ">=" in msg
        return
    report = validate_schedule(sched)
    assert report.num_steps == sum(len(v) for v in sched.lowered().values())
    validate_schedule(sched, fsdp=True)
    sim = simulate_schedule(sched, UNIT)
    idle = {sim.idle(r) for r in range(p)}
    F, I, W = UNIT["F"], UNIT["I"], UNIT["W"]
    v = sched.stages_per_rank
    if name in SINGLE:
        assert idle == {(p - 1) * (F + I + W)}
        assert sim.bubble_ratio() == pytest.approx((p - 1) / m, abs=0, rel=1e-12)
    elif name in ("Interleaved1F1B", "LoopedBFS"):
        if m % p == 0:
            assert sim.bubble_ratio() == pytest.approx((p - 1) / (v * m), abs=0, rel=1e-12)
        else:  # fewer microbatches than ranks in a round: the chunks cannot interleave
            assert idle == {(p - 1 + (v - 1) * (p - m)) * (F + I + W)}
    elif name == "InterleavedZeroBubble" and m % p == 0:
        assert idle == {(p - 1) * (F + I - W)}
    elif name == "ZBVZeroBubble" and m >= 2 * p:
        assert idle == {(p - 1) * (F + I - W)}
    elif name == "DualPipeV":
        f_and_b, b = F + I + W, I + W
        assert idle == {(p - 1) * (f_and_b + b - 3 * W)}


@pytest.mark.parametrize("costs", [{"F": 2.0, "I": 1.0, "W": 1.0}, {"F": 1.0, "I": 2.0, "W": 1.0},
                                   {"F": 1.0, "I": 1.0, "W": 0.5}, {"F": 3.0, "I": 2.0, "W": 1.0}])
@pytest.mark.parametrize("v", [1, 2])
def test_zero_bubble_h1_formula_for_unequal_costs(costs, v):
    for p in (2, 4, 8):
        for m in (p, 2 * p, 4 * p):
            sim = simulate_schedule(generate_schedule("InterleavedZeroBubble", p, m, v), costs)
            expect = (p - 1) * (costs["F"] + costs["I"] - costs["W"])
            assert {sim.idle(r) for r in range(p)} == {expect}, (p, m)
            one = simulate_schedule(generate_schedule("1F1B", p, m), costs)
            assert sim.max_idle() < one.max_idle()


@pytest.mark.parametrize("p", [2, 4, 8])
def test_zbv_bubble_below_1f1b_at_same_m(p):
    for m in (p, 2 * p, 4 * p):
        zbv = simulate_schedule(generate_schedule("ZBVZeroBubble", p, m), UNIT)  # 2 chunks per rank
        one = simulate_schedule(generate_schedule("1F1B", p, m), {"F": 2.0, "I": 2.0, "W": 2.0})  # whole stages
        assert zbv.busy(0) == one.busy(0)  # the same work per rank
        assert zbv.max_idle() < one.max_idle()
        assert zbv.idle_fraction() < one.idle_fraction()


# ---------------------------------------------------------------------- torch as the oracle
def _torch_order(name, p, m, v):
    from torch import nn
    from torch.distributed.pipelining import schedules as ts
    cls = ts.get_schedule_class(name)
    stages = [types.SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, stage_index=i * p,
                                    submod=nn.Identity(), stage_index_to_group_rank={}) for i in range(v)]
    if issubclass(cls, ts.PipelineScheduleSingle):
        return cls(stages[0], m).pipeline_order
    return cls(stages, m).pipeline_order


@pytest.mark.parametrize("name,p,m", TORCH_CASES)
def test_lists_equal_torch(name, p, m):
    v = 1 if name in SINGLE else 2
    try:
        theirs = _torch_order(name, p, m, v)
    except ValueError:
        theirs = None
    ours = _build(name, p, m)
    if theirs is None:  # torch refuses: 1F1B with m < p (we run it: warm-up shrinks to m), DualPipeV m < 2p
        assert (name == "1F1B" and m < p) or isinstance(ours, ScheduleConstraintError)
        return
    for r in range(p):
        mine = list(ours.compute[r])
        if name in SINGLE:
            mine = add_reduce_grad(mine, m)  # torch's single-stage pipeline_order carries REDUCE_GRAD, no idles
        got = ["" if a is None else str(a) for a in mine]
        want = ["" if a is None else str(a) for a in theirs[r]]
        if name == "1F1B" and r == p - 1:
            # torch 2.13's Schedule1F1B._get_pipeline_order numbers the last rank's forwards from 1 (it ends
            # with F{m}, a microbatch that does not exist); its executed order is F0, B0, F1 ... like ours
            want = [f"{p - 1}F{int(x.split('F')[1]) - 1}" if "F" in x else x for x in want]
        assert got == want, f"rank {r}"


def test_torch_reads_our_csv(tmp_path):
    from torch import nn
    from torch.distributed.pipelining import schedules as ts
    sched = generate_schedule("InterleavedZeroBubble", 4, 8)
    path = tmp_path / "zb.csv"
    schedule_to_csv(sched, path)
    stages = [types.SimpleNamespace(num_stages=8, group_size=4, group_rank=0, stage_index=i * 4,
                                    submod=nn.Identity(), stage_index_to_group_rank={}) for i in range(2)]
    runtime = ts._PipelineScheduleRuntime(stages, 8)  # pylint: disable=protected-access
    runtime._load_csv(str(path))  # pylint: disable=protected-access
    for r in range(4):
        assert [str(a) if a else "" for a in runtime.pipeline_order[r]] == \
            [str(a) if a else "" for a in sched.compute[r]]


# ---------------------------------------------------------------------- CSV, explain, parse
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_csv_round_trip(name, tmp_path):
    sched = generate_schedule(name, 4, 8)
    text = schedule_to_csv(sched, tmp_path / "s.csv")
    back = schedule_from_csv(str(tmp_path / "s.csv"))
    assert back.compute == sched.compute and back.stage_to_rank == sched.stage_to_rank
    assert back.n_microbatches == 8 and schedule_to_csv(back) == text
    validate_schedule(back)
    lowered = schedule_to_csv(sched, lowered=True)
    rows = [[MetaStep.parse(c) for c in row.split(",")] for row in lowered.splitlines()]
    assert {r: rows[r] for r in range(4)} == sched.lowered()
    validate_lists({r: rows[r] for r in range(4)}, sched.stage_to_rank, 8)


def test_parse_and_errors():
    assert str(MetaStep.parse("2I0")) == "2I0" and MetaStep.parse("2I0").type is MetaStepType.I
    ov = MetaStep.parse("(0F3;1B1)OVERLAP_F_B")
    assert ov.sub_steps == (MetaStep(0, MetaStepType.F, 3), MetaStep(1, MetaStepType.B, 1)) and str(ov) == \
        "(0F3;1B1)OVERLAP_F_B"
    assert MetaStep.parse(" ") is None and str(MetaStep.parse("3REDUCE_GRAD")) == "3REDUCE_GRAD"
    for bad in ("2X0", "F0", "0F", "0UNSHARD1", "(0F1)OVERLAP_F_B"):
        with pytest.raises(ValueError, match="MetaStep.parse"):
            MetaStep.parse(bad)
    with pytest.raises(ValueError, match="non-compute"):
        schedule_from_csv("0F0,0SEND_F0\n1RECV_F0,1F0\n")


def test_explain_text_and_png(tmp_path):
    text = explain_schedule("ZBVZeroBubble", 2, 4, png=tmp_path / "zbv.png")
    lines = text.splitlines()
    assert lines[0] == "ZBVZeroBubble schedule: 2 ranks, 4 stages, 4 microbatches"
    assert lines[1].startswith("rank 0: 0F0") and lines[2].startswith("rank 1: ")
    assert "bubble 0.0417 of the ideal step" in text and "(p-1)(F+I-W)" in text
    assert (tmp_path / "zbv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one = explain_schedule(generate_schedule("1F1B", 2, 4))
    assert "rank 1: .. F0 B0 B0 F1" in one and "bubble 0.2500" in one


# ---------------------------------------------------------------------- rejections
def test_constraint_errors_name_the_schedule_and_what_is_accepted():
    with pytest.raises(ScheduleConstraintError, match=r"Interleaved1F1B: n_microbatches=9 with 8 stages on 4 ranks .* multiple of that; accepted m"):
        generate_schedule("Interleaved1F1B", 4, 9)
    with pytest.raises(ScheduleConstraintError, match="exactly 2 stages per rank"):
        generate_schedule("ZBVZeroBubble", 2, 4, stages_per_rank=3)
    with pytest.raises(ScheduleConstraintError, match="one stage per rank"):
        generate_schedule("GPipe", 2, 4, stages_per_rank=2)
    with pytest.raises(ScheduleConstraintError, match="n_microbatches must be a positive int"):
        generate_schedule("1F1B", 2, 0)
    with pytest.raises(ValueError, match="unknown schedule 'Pipe'"):
        generate_schedule("Pipe", 2, 2)


def test_deadlocking_lists_are_rejected_naming_the_cycle():
    s = MetaStep.parse
    lists = {0: [s("0F0"), s("0RECV_B0"), s("0SEND_F0"), s("0B0")],
             1: [s("1RECV_F0"), s("1F0"), s("1B0"), s("1SEND_B0")]}
    with pytest.raises(ScheduleValidationError) as info:
        validate_lists(lists, (0, 1), 1)
    msg = str(info.value)
    assert "deadlock: rank 0 waits at 0RECV_B0 (position 1) for 1SEND_B0 on rank 1" in msg
    assert "rank 1 waits at 1RECV_F0 (position 0) for 0SEND_F0" in msg


def test_both_ranks_sending_first_is_rejected():
    s = MetaStep.parse
    # 1F1B on 2 ranks with each rank sending before it receives the peer's message: under rendezvous both sit in SEND
    lists = {0: [s("0F0"), s("0SEND_F0"), s("0F1"), s("0SEND_F1"), s("0RECV_B0"), s("0B0"), s("0RECV_B1"), s("0B1")],
             1: [s("1RECV_F0"), s("1F0"), s("1B0"), s("1SEND_B0"), s("1RECV_F1"), s("1F1"), s("1B1"),
                 s("1SEND_B1")]}
    with pytest.raises(ScheduleValidationError, match=r"rank 0 waits at 0SEND_F1 .* rank 1 waits at 1SEND_B0"):
        validate_lists(lists, (0, 1), 2)


@pytest.mark.parametrize("lists,match", [
    ({0: ["0B0", "0F0", "0SEND_F0"], 1: ["1RECV_F0", "1F0", "1B0"]}, "backward at position 0 runs before its forward"),
    ({0: ["0F0", "0SEND_F0", "0RECV_B0", "0B0"], 1: ["1F0", "1B0", "1SEND_B0"]},
     r"rank 1 position 0 \(1F0\): needs 1RECV_F0 from rank 0"),
    ({0: ["0F0", "0RECV_B0", "0B0"], 1: ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]}, "produced but never sent"),
    ({0: ["0F0", "0F0", "0SEND_F0", "0B0"], 1: ["1RECV_F0", "1F0", "1B0"]}, "runs F of microbatch 0 twice"),
    ({0: ["1F0"], 1: ["0F0"]}, "stage 1 lives on rank 1, not on rank 0"),
    ({0: ["0F0", "0I0", "0SEND_F0"], 1: ["1RECV_F0", "1F0", "1B0"]}, "needs a full backward"),
])
def test_broken_lists_are_rejected_before_running(lists, match):
    parsed = {r: [MetaStep.parse(x) for x in v] for r, v in lists.items()}
    with pytest.raises(ScheduleValidationError, match=match):
        validate_lists(parsed, (0, 1), 1)


def test_custom_schedule_from_hand_written_lists():
    s = MetaStep.parse
    sched = custom_schedule({0: [s("0F0"), s("0F1"), None, s("0I0"), s("0I1"), s("0W0"), s("0W1")],
                             1: [None, s("1F0"), s("1B0"), s("1F1"), s("1B1")]}, 2)
    report = validate_schedule(sched)
    order = [str(a) for _, _, a in report.global_order]
    assert order.index("0SEND_F0") + 1 == order.index("1RECV_F0")
    assert [str(a) for a in sched.lowered()[1]] == ["1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1",
                                                     "1SEND_B1", "1REDUCE_GRAD"]


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_forward_only_lists_validate_and_hold_no_backward(name):
    sched = generate_schedule(name, 4, 8)
    fwd = sched.forward_only()
    lists = fwd.lowered(fsdp=True)
    validate_lists(lists, fwd.stage_to_rank, fwd.n_microbatches, forward_only=True)
    kinds = {a.type for steps in lists.values() for a in steps}
    assert kinds <= {MetaStepType.F, MetaStepType.SEND_F, MetaStepType.RECV_F, MetaStepType.UNSHARD,
                     MetaStepType.RESHARD}, kinds
    for r in range(4):  # each rank keeps its forward steps in schedule order
        want = [leaf for a in sched.steps(r) for leaf in a.leaves() if leaf.type is MetaStepType.F]
        assert [a for a in lists[r] if a.type is MetaStepType.F] == want
    with pytest.raises(ScheduleValidationError, match="forward-only list holds a backward step"):
        validate_lists(sched.lowered(), sched.stage_to_rank, sched.n_microbatches, forward_only=True)


def test_merge_entries_follow_torch_output_merge_spec():
    from hyper_parallel.pipeline.microbatch import BatchDimSpec, merge_entries
    assert merge_entries(None, 2) == [BatchDimSpec(0)] * 2
    assert merge_entries(BatchDimSpec(1), 3) == [BatchDimSpec(1)] * 3
    assert merge_entries((BatchDimSpec(1), None), 2) == [BatchDimSpec(1), None]
    with pytest.raises(ValueError, match="has 1 entries but the last stage returns 2 output"):
        merge_entries([BatchDimSpec(0)], 2)
    with pytest.raises(TypeError, match="one entry per output"):
        merge_entries("cat", 2)
