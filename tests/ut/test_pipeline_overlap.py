# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (no process): ``pair_forward_backward`` (the ``overlap_b_f`` lists) and the trace-overlap measure."""
import json

import pytest

from hyper_parallel.devtools.trace_overlap import Interval, main, overlap_of, trace_intervals, trace_overlap
from hyper_parallel.pipeline import MetaStep, MetaStepType, custom_schedule, generate_schedule, validate_schedule
from hyper_parallel.pipeline.schedules import pair_forward_backward

T = MetaStepType


def _leaves(ops):
    return [leaf for a in ops if a is not None for leaf in a.leaves()]


@pytest.mark.parametrize("name,p,m,v", [
    ("Interleaved1F1B", 2, 4, 2), ("Interleaved1F1B", 2, 8, 2), ("Interleaved1F1B", 4, 8, 2), ("1F1B", 2, 4, 1),
    ("1F1B", 4, 8, 1), ("DualPipeV", 2, 5, 2), ("DualPipeV", 4, 8, 2), ("InterleavedZeroBubble", 2, 4, 2),
    ("GPipe", 2, 3, 1),
])
def test_pairs_keep_every_step_in_order_and_validate(name, p, m, v):
    plain = generate_schedule(name, p, m, v)
    paired = pair_forward_backward(plain)
    validate_schedule(paired)  # raises on a deadlock
    for r in range(p):
        assert _leaves(paired.compute[r]) == _leaves(plain.compute[r])
        for a in paired.compute[r]:
            if a is not None and a.type is T.OVERLAP_F_B:
                fwd, bwd = a.sub_steps
                assert fwd.type is T.F and bwd.type in (T.B, T.I)
                assert fwd.microbatch_index != bwd.microbatch_index  # independent halves


def test_interleaved_pairs_its_steady_state():
    paired = pair_forward_backward(generate_schedule("Interleaved1F1B", 2, 4, 2))
    pairs = {r: [str(a) for a in paired.compute[r] if a is not None and a.type is T.OVERLAP_F_B] for r in (0, 1)}
    assert pairs[0] == ["(0F2;2B0)OVERLAP_F_B", "(0F3;2B1)OVERLAP_F_B", "(2F2;0B0)OVERLAP_F_B", "(2F3;0B1)OVERLAP_F_B"]
    assert pairs[1] == ["(1F2;1B0)OVERLAP_F_B", "(1F3;1B1)OVERLAP_F_B"]


def test_a_pair_that_would_deadlock_is_left_unpaired():
    # rank 0 (stage 0): F0 F1 B0 B1; rank 1 (stage 1): F0 F1 B0 B1. Pairing (F1;B0) on both makes each wait
    # for the other's pair (rank 1's F1 needs rank 0's F1, rank 0's B0 needs rank 1's B0); pairing only rank
    # 0's makes rank 1's F1 wait for a pair that waits for rank 1's B0. Only rank 1's pair runs.
    steps = {r: [MetaStep(r, t, mb) for t, mb in ((T.F, 0), (T.F, 1), (T.B, 0), (T.B, 1))] for r in (0, 1)}
    paired = pair_forward_backward(custom_schedule(steps, 2))
    assert [str(a) for a in paired.compute[0]] == ["0F0", "0F1", "0B0", "0B1"]
    assert [str(a) for a in paired.compute[1]] == ["1F0", "(1F1;1B0)OVERLAP_F_B", "1B1"]


def _trace(events):
    return {"traceEvents": [{"ph": "X", "name": n, "ts": s, "dur": e - s, "pid": 1, "tid": t} for n, s, e, t in events]
            + [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}]}


def test_overlap_counts_time_both_kinds_are_open_on_different_threads():
    trace = _trace([("hp.pp.compute.0F1", 0, 10, 1), ("hp.pp.compute.2F2", 20, 30, 1),
                    ("hp.pp.compute.1B0", 5, 25, 2), ("hp.pp.compute.1B1", 26, 28, 1)])
    report = trace_overlap(trace, r"\dF\d", r"\dB\d")
    # 0F1 x 1B0: [5, 10]; 2F2 x 1B0: [20, 25]; 1B1 shares 2F2's thread: not counted
    assert report.both_us == 10 and report.a_us == 20 and report.b_us == 22
    assert report.a_count == 2 and report.b_count == 2 and len(report.pairs) == 2
    same = trace_overlap(trace, r"\dF\d", r"\dB\d", different_threads=False)
    assert same.both_us == 12  # + [26, 28]
    assert trace_overlap(trace, r"\dF\d", r"nothing").both_us == 0


def test_overlap_union_does_not_count_twice():
    a = [Interval("a", 0, 10, 1, 1)]
    b = [Interval("b1", 2, 8, 1, 2), Interval("b2", 4, 12, 1, 3)]
    report = overlap_of(a, b)
    assert report.both_us == 8 and report.b_us == 10 and report.share_of_b == 0.8


def test_trace_overlap_cli(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace([("x", 0, 10, 1), ("y", 5, 15, 2)])))
    assert main([str(path), "--a", "x", "--b", "y"]) == 0
    assert "both open 0.01 ms" in capsys.readouterr().out
    assert main([str(path), "--a", "x", "--b", "x"]) == 1  # one thread: no overlap
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main([str(bad), "--a", "x", "--b", "y"]) == 2
    assert "traceEvents" in capsys.readouterr().err
    with pytest.raises(ValueError, match="chrome trace"):
        trace_intervals({"events": []}, "x")
