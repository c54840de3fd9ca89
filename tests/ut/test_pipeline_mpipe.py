# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the Mpipe schedule (encoder position ahead of 1F1B over the LM positions) and its microbatch balancer."""
import itertools

import pytest

from hyper_parallel.pipeline import (MpipeConfig, ScheduleConstraintError, balance_microbatches, explain_schedule,
                                     generate_schedule, mpipe_schedule, simulate_schedule, validate_schedule)
from hyper_parallel.pipeline.mpipe import microbatch_costs


@pytest.mark.parametrize("p,m", [(p, m) for p in (2, 3, 4, 6) for m in (1, 2, 3, p, 2 * p, 8)])
def test_every_lead_validates_and_the_minimal_lead_is_1f1b(p, m):
    for ahead in [None, *sorted({min(m, p - 1), p, m, m + 3} - {0})]:
        sched = mpipe_schedule(p, m, ahead)
        validate_schedule(sched)
        validate_schedule(sched, fsdp=True)
        first = [str(a) for a in sched.compute[0] if a is not None]
        lead = m if ahead is None else min(m, ahead)
        assert first[:lead] == [f"0F{k}" for k in range(lead)]
    one = generate_schedule("1F1B", p, m)
    ours = mpipe_schedule(p, m, min(m, p - 1))
    for r in range(p):
        assert [a for a in ours.compute[r] if a] == [a for a in one.compute[r] if a], r
    assert generate_schedule("Mpipe", p, m).compute == mpipe_schedule(p, m).compute


def test_lead_below_the_warm_up_and_one_position_are_refused():
    with pytest.raises(ScheduleConstraintError, match=r"encoder_ahead=1 .* at least num_ranks - 1 = 2"):
        mpipe_schedule(3, 4, 1)
    with pytest.raises(ScheduleConstraintError, match="num_ranks >= 2"):
        mpipe_schedule(1, 4)
    with pytest.raises(ValueError, match="encoder_ahead=0"):
        MpipeConfig(encoder_ahead=0)


def _costs(enc):
    """Encoder position: forward enc[mb], backward 2 * enc[mb]; LM positions F = 1, B = 2."""
    def cost(rank, step):
        scale = enc[step.microbatch_index] if rank == 0 else 1.0
        return scale * (1.0 if step.type.value == "F" else 2.0)
    return cost


def test_running_ahead_absorbs_a_slow_encoder_microbatch():
    enc = [3.0, 0.2, 2.5, 0.3]            # a large image, a text-only sample, a large one, a small one
    lead = simulate_schedule(mpipe_schedule(3, 4), _costs(enc))
    plain = simulate_schedule(mpipe_schedule(3, 4, 2), _costs(enc))   # = 1F1B's rank 0
    assert lead.makespan < plain.makespan
    balanced = [sum(enc) / 4] * 4         # the same total spread evenly by the balancer
    assert simulate_schedule(mpipe_schedule(3, 4), _costs(balanced)).makespan <= lead.makespan
    text = explain_schedule(mpipe_schedule(3, 4), costs=_costs(enc))
    assert text.splitlines()[0] == "Mpipe schedule: 3 ranks, 3 stages, 4 microbatches"
    assert "encoder position ahead" in text and text.count("rank ") >= 3


def test_balance_keeps_sizes_and_evens_costs():
    costs = [1, 17, 65, 41]
    assert balance_microbatches(costs, [2, 2]) == [[0, 2], [1, 3]]
    assert microbatch_costs(costs, [[0, 2], [1, 3]]) == [66.0, 58.0]
    costs = [5, 1, 9, 3, 7, 2, 8, 4]
    groups = balance_microbatches(costs, [2, 2, 2, 2])
    assert sorted(i for g in groups for i in g) == list(range(8)) and all(len(g) == 2 for g in groups)
    got = max(microbatch_costs(costs, groups))
    best = min(max(microbatch_costs(costs, [list(x) for x in (perm[0:2], perm[2:4], perm[4:6], perm[6:8])]))
               for perm in itertools.permutations(range(8)))
    assert got == best == 10.0
    contiguous = max(microbatch_costs(costs, [[0, 1], [2, 3], [4, 5], [6, 7]]))
    assert got < contiguous


@pytest.mark.parametrize("costs,sizes,match", [([1, -2], [2], "entry 1 is -2"), ([1, 2, 3], [2], "hold 2 samples"),
                                               ([1, 2], [0, 2], "positive ints"), ([1, "a"], [2], "entry 1")])
def test_balance_rejects_bad_input(costs, sizes, match):
    with pytest.raises(ValueError, match=match):
        balance_microbatches(costs, sizes)
