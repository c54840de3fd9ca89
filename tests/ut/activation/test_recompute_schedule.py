# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (pure): the independent recompute schedule: per-layer decisions from a default, overrides and
``keep_last``; which block kinds a policy recomputes (the torch ``CheckpointPolicy`` names); clear errors."""
import pytest

from hyper_parallel.activation.policy import CheckpointPolicy, PolicyError, op_policy, save_ops
from hyper_parallel.activation.schedule import BLOCK_OPS, RecomputeSchedule, block_recomputes, parse_layer_spec


def test_policies_decide_blocks_by_the_op_they_stand_for():
    op = op_policy()  # keeps matmuls, attention, routing and collectives
    assert [k for k in BLOCK_OPS if block_recomputes(op, k)] == ["norm", "activation"]
    only_mm = save_ops(["matmul"])  # Megatron's selective recompute: the attention core too
    assert [k for k in BLOCK_OPS if block_recomputes(only_mm, k)] == ["attention", "routing", "norm", "activation"]
    keep_act = save_ops(["matmul", "aten.silu"])
    assert not block_recomputes(keep_act, "activation") and block_recomputes(keep_act, "norm")
    with pytest.raises(PolicyError, match="block kind 'rope'"):
        block_recomputes(op, "rope")


def test_schedule_from_default_overrides_and_keep_last():
    s = RecomputeSchedule.build(6, "op", {"0": "full", "1-2": {"attention": "must_recompute",
                                                               "norm": CheckpointPolicy.PREFER_SAVE},
                                          "-2": ["matmul"]}, keep_last=1)
    assert s.describe() == ("full", "attention", "attention", "norm,activation", "attention,routing,norm,activation",
                            "none")
    assert RecomputeSchedule.build(2, "none").describe() == ("none", "none")
    assert RecomputeSchedule.build(3, "full", keep_last=3).describe() == ("none",) * 3
    assert parse_layer_spec("-1", 4) == (3,) and parse_layer_spec(" 1-3", 4) == (1, 2, 3)


@pytest.mark.parametrize("call,match", [
    (lambda: RecomputeSchedule.build(0), "num_layers"),
    (lambda: RecomputeSchedule.build(2, keep_last=3), "keep_last"),
    (lambda: RecomputeSchedule.build(2, "some"), "expected 'full', 'op'"),
    (lambda: RecomputeSchedule.build(2, "op", {"5": "full"}), "outside 0..1"),
    (lambda: RecomputeSchedule.build(2, "op", {"a-b": "full"}), "expected an index"),
    (lambda: RecomputeSchedule.build(2, {"mlp": "save"}), "block 'mlp'"),
    (lambda: RecomputeSchedule.build(2, lambda *a: True), "policy function"),
])
def test_clear_errors(call, match):
    with pytest.raises(PolicyError, match=match):
        call()
