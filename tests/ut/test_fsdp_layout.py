# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the pure parts of FSDP — flat-buffer layout, reshard_after_forward validation, policies."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel.core.placement import chunk_sizes
from hyper_parallel.fsdp.api import (CPUOffloadPolicy, FlatLayout, MixedPrecisionPolicy, OffloadPolicy, dtype_groups,
                                     post_forward_group_size, resolve_reduce_dtype)

shapes = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(shapes=shapes, world=st.integers(1, 8))
def test_layout_slots_hold_every_shard_and_rebuild_the_full_parameter(shapes, world):
    lay = FlatLayout(shapes, world)
    assert lay.total == sum(lay.slots)
    assert list(lay.offsets) == [sum(lay.slots[:i]) for i in range(len(shapes))]
    for i, shape in enumerate(shapes):
        rows = [lay.local_shape(i, r)[0] for r in range(world)]
        assert tuple(rows) == chunk_sizes(shape[0], world)
        assert all(lay.local_numel(i, r) <= lay.slots[i] for r in range(world))
        # gathered rank-major slots, copied out parameter-major: rank r's rows start at r * rows[i]
        # and torch.chunk puts every non-empty chunk at index * ceil(d0 / world), so the first d0
        # rows of the padded parameter are exactly the parameter
        starts = [r * lay.rows[i] for r in range(world) if rows[r]]
        assert starts == [sum(rows[:r]) for r in range(world) if rows[r]]
        off, length = lay.unsharded_range(i)
        assert off == world * lay.offsets[i] and length == world * lay.slots[i] >= lay.full_numel(i)


@given(shapes=shapes, world=st.sampled_from([2, 4, 8]), k=st.sampled_from([1, 2, 4, 8]))
def test_post_forward_ranges_tile_the_gathered_buffer(shapes, world, k):
    lay = FlatLayout(shapes, world)
    if world % k:
        with pytest.raises(ValueError, match="must divide"):
            lay.post_forward_range(k, 0)
        return
    ranges = [lay.post_forward_range(k, j) for j in range(k)]
    assert ranges[0][0] == 0 and sum(n for _, n in ranges) == world * lay.total
    assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:]))


def test_layout_example_and_errors():
    lay = FlatLayout([(7, 12), (7,), (1, 9)], 2)
    assert lay.rows == (4, 4, 1) and lay.slots == (48, 4, 9) and lay.total == 61
    assert lay.local_shape(0, 1) == (3, 12) and lay.local_shape(2, 1) == (0, 9)
    assert "total=61" in repr(lay)
    with pytest.raises(ValueError, match="0-dimensional"):
        FlatLayout([()], 2)
    with pytest.raises(ValueError, match="positive group size"):
        FlatLayout([(2,)], 0)


def test_post_forward_group_size():
    assert post_forward_group_size(True, 4) == 4
    assert post_forward_group_size(False, 4) == 1
    assert post_forward_group_size(2, 4) == 2
    for bad in (3, 0, 8):
        with pytest.raises(ValueError, match="divisor of the shard group size 4"):
            post_forward_group_size(bad, 4)
    with pytest.raises(TypeError, match="True, False or an int"):
        post_forward_group_size(2.0, 4)


def test_policies_and_dtype_groups():
    mp = MixedPrecisionPolicy(param_dtype="bf16")
    assert resolve_reduce_dtype(mp, "bf16") == "bf16"
    assert resolve_reduce_dtype(MixedPrecisionPolicy(reduce_dtype="fp32"), "bf16") == "fp32"
    assert resolve_reduce_dtype(None, "fp32") == "fp32"
    assert mp.cast_forward_inputs and mp.output_dtype is None
    assert isinstance(CPUOffloadPolicy(), OffloadPolicy) and CPUOffloadPolicy().pin_memory
    assert dtype_groups(["a", "b", "a"]) == (("a", (0, 2)), ("b", (1,)))


def test_import_hyper_parallel_fsdp_needs_no_torch():
    import subprocess
    import sys
    code = ("import sys, hyper_parallel, hyper_parallel.fsdp as f; f.MixedPrecisionPolicy(); "
            "assert 'torch' not in sys.modules, 'torch was imported'; "
            "assert hyper_parallel.MixedPrecisionPolicy is f.MixedPrecisionPolicy")
    subprocess.run([sys.executable, "-c", code], check=True)
