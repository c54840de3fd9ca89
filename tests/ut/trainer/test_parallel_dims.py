# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ParallelDims: inference, products, validation messages, coordinates and flattened group layouts."""
import pytest

from hyper_parallel.trainer.parallel_dims import ParallelDims


def test_infer_one_dim():
    d = ParallelDims(dp_shard=-1, tp=2, world_size=8)
    assert (d.dp_replicate, d.dp_shard, d.cp, d.tp, d.pp) == (1, 4, 1, 2, 1)
    assert d.dp == 4 and d.fsdp_enabled and d.tp_enabled and not d.pp_enabled
    assert d.mesh_dims == (("dp_shard", 4), ("tp", 2))
    d = ParallelDims(dp_replicate=2, dp_shard=2, cp=1, tp=1, pp=-1, world_size=8)
    assert d.pp == 2 and d.mesh_dims == (("pp", 2), ("dp_replicate", 2), ("dp_shard", 2))
    assert ParallelDims(world_size=1).mesh_dims == (("dp_shard", 1),)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dp_shard=2, tp=2, world_size=8), "pp(1)*dp_replicate(1)*dp_shard(2)*cp(1)*tp(2) = 4 does not match "
                                           "world_size 8"),
    (dict(dp_shard=-1, tp=3, world_size=8), "cannot infer dp_shard: world_size 8 is not divisible by"),
    (dict(dp_shard=-1, tp=-1, world_size=8), "only one degree may be -1"),
    (dict(dp_shard=0, world_size=2), "ParallelDims(dp_shard): expected a positive int or -1"),
    (dict(dp_shard=2, ep=-1, world_size=2), "cannot be -1"),
    (dict(dp_shard=2, ep=4, world_size=2), "ep=4 must divide dp_shard*cp*tp = 2*1*1 = 2"),
    (dict(dp_shard=1, pp=2, ep=2, world_size=2), "ep=2 must divide"),
    (dict(dp_shard=2, world_size=True), "ParallelDims(world_size)"),
])
def test_errors_name_the_product(kwargs, needle):
    with pytest.raises(ValueError) as err:
        ParallelDims(**kwargs)
    assert needle in str(err.value)


def test_coordinates_and_dp_rank():
    d = ParallelDims(dp_replicate=1, dp_shard=2, cp=1, tp=2, pp=2, world_size=8)
    assert d.coordinate(0) == {"pp": 0, "dp_replicate": 0, "dp_shard": 0, "cp": 0, "tp": 0}
    assert d.coordinate(7) == {"pp": 1, "dp_replicate": 0, "dp_shard": 1, "cp": 0, "tp": 1}
    assert [d.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    d = ParallelDims(dp_replicate=2, dp_shard=2, world_size=4)
    assert [d.dp_rank(r) for r in range(4)] == [0, 1, 2, 3]


def test_flat_groups():
    d = ParallelDims(dp_shard=2, cp=2, tp=2, world_size=8)
    assert d.flat_groups(("dp_shard", "cp")) == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert d.flat_groups(("tp",)) == ((0, 1), (2, 3), (4, 5), (6, 7))
    d = ParallelDims(dp_shard=2, cp=2, pp=2, world_size=8)
    assert d.flat_groups(("dp_shard", "cp")) == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_mesh_needs_build():
    with pytest.raises(RuntimeError, match="build_mesh"):
        ParallelDims(world_size=2, dp_shard=2).mesh("dp")
