# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: boundary plans between pipeline positions with different rank sets (pure, no processes)."""
import pytest

from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.placement import Partial, Replicate, Shard
from hyper_parallel.pipeline.meshes import StageLayout, layout_spec, plan_boundary, position_ranks


def test_position_ranks_group_the_ranks_of_each_position():
    assert position_ranks({0: 0, 1: 1, 2: 1}, (0, 1)) == {0: (0,), 1: (1, 2)}
    assert position_ranks({3: 0, 1: 3, 0: 1, 2: 2}, (0, 1, 1, 0)) == {0: (1, 3), 1: (0, 2)}


def test_one_rank_to_two_ranks_sharded_input():
    src = layout_spec(None, (4, 16), (0,), "t")
    plan = plan_boundary(src, StageLayout(MeshTopology((2,), (1, 2)), (Shard(1),)), (1, 2), 4, "t")
    assert [(p.src, p.dst, p.offset, p.shape) for p in plan.fwd] == [(0, 1, (0, 0), (4, 8)), (0, 2, (0, 8), (4, 8))]
    assert sorted((p.src, p.dst, p.offset) for p in plan.bwd) == [(1, 0, (0, 0)), (2, 0, (0, 8))]


def test_replicated_input_is_sent_to_every_rank_and_its_gradient_read_once():
    src = layout_spec(None, (4, 6), (0,), "t")
    plan = plan_boundary(src, StageLayout(MeshTopology((2,), (1, 2)), None), (1, 2), 4, "t")
    assert [(p.src, p.dst) for p in plan.fwd] == [(0, 1), (0, 2)]
    assert len(plan.bwd) == 1 and plan.bwd[0].dst == 0 and plan.bwd[0].shape == (4, 6)


def test_partial_sender_layout_reads_as_replicate():
    layout = ((2,), (0, 1), ("tp",), (Partial(),), (4, 6))
    spec = layout_spec(layout, (4, 6), (0, 1), "t")
    assert spec.placements == (Replicate(),)


def test_bad_layouts_are_named():
    with pytest.raises(ValueError, match="plain tensor leaves a stage that runs on ranks"):
        layout_spec(None, (4, 6), (0, 1), "boundary 0 -> 1")
    src = layout_spec(None, (4, 6), (0,), "t")
    with pytest.raises(ValueError, match="has no device_mesh"):
        plan_boundary(src, StageLayout(None, None), (1, 2), 4, "t")
    with pytest.raises(ValueError, match="device_mesh holds ranks"):
        plan_boundary(src, StageLayout(MeshTopology((2,), (1, 3)), None), (1, 2), 4, "t")
