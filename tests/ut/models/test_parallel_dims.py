# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the one ParallelDims (models + trainer): inference, products, every validation error, mesh dims,
coordinates, flattened group layouts, named meshes (pure logic, no processes)."""
import pytest

from hyper_parallel.models import ParallelDims
from hyper_parallel.models.parallel_dims import MESH_NAMES, check_degrees


def test_one_class_for_models_and_trainer():
    import hyper_parallel.trainer as trainer
    from hyper_parallel.models.spec import ParallelDims as spec_dims
    assert trainer.ParallelDims is ParallelDims and spec_dims is ParallelDims


def test_issue_signature_positional_order():
    d = ParallelDims(1, -1, 1, 2, 1, 1, 8)  # dp_replicate, dp_shard, cp, tp, pp, ep, world_size
    assert (d.dp_replicate, d.dp_shard, d.cp, d.tp, d.pp, d.ep, d.world_size) == (1, 4, 1, 2, 1, 1, 8)


def test_infer_any_one_dim_and_mesh_dims():
    d = ParallelDims(dp_shard=-1, tp=2, world_size=8)
    assert (d.dp_replicate, d.dp_shard, d.cp, d.tp, d.pp) == (1, 4, 1, 2, 1)
    assert d.dp == 4 and d.fsdp_enabled and d.tp_enabled and not d.pp_enabled and d.dp_enabled
    assert d.mesh_dims() == [("dp_shard", 4), ("tp", 2)]
    d = ParallelDims(dp_replicate=2, dp_shard=2, cp=1, tp=1, pp=-1, world_size=8)
    assert d.pp == 2 and d.mesh_dims() == [("pp", 2), ("dp_replicate", 2), ("dp_shard", 2)]
    d = ParallelDims(dp_replicate=2, cp=2, tp=2, world_size=16)
    assert d.dp_shard == 2 and d.dp == 4 and d.fsdp_enabled and d.cp_enabled
    assert d.mesh_dims() == [("dp_replicate", 2), ("dp_shard", 2), ("cp", 2), ("tp", 2)]
    assert ParallelDims(pp=2, tp=2, world_size=4).mesh_dims() == [("pp", 2), ("dp_shard", 1), ("tp", 2)]
    assert ParallelDims(world_size=1).mesh_dims() == [("dp_shard", 1)]
    assert not ParallelDims(tp=2, world_size=2).fsdp_enabled
    d = ParallelDims(dp_shard=2, cp=-1, world_size=4)
    assert d.cp == 2 and d.fsdp_enabled
    d = ParallelDims(dp_shard=1, tp=2, ep=2, etp=2, world_size=2)
    assert d.ep_enabled and d.etp == 2


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dp_shard=2, tp=2, world_size=8), "ParallelDims: pp(1)*dp_replicate(1)*dp_shard(2)*cp(1)*tp(2) = 4 does not "
                                           "match world_size 8"),
    (dict(dp_shard=-1, tp=3, world_size=8), "cannot infer dp_shard: world_size 8 is not divisible by "
                                            "pp(1)*dp_replicate(1)*cp(1)*tp(3) = 3"),
    (dict(dp_shard=2, pp=-1, tp=3, world_size=8), "cannot infer pp: world_size 8 is not divisible by "
                                                  "dp_replicate(1)*dp_shard(2)*cp(1)*tp(3) = 6"),
    (dict(dp_shard=-1, tp=-1, world_size=8), "only one degree may be -1 (inferred), got ['dp_shard', 'tp']"),
    (dict(dp_shard=0, world_size=2), "ParallelDims(dp_shard=0): expected a positive int or -1 (inferred)"),
    (dict(tp=-2, world_size=2), "ParallelDims(tp=-2): expected a positive int or -1 (inferred)"),
    (dict(cp=1.5, world_size=2), "ParallelDims(cp=1.5): expected a positive int or -1"),
    (dict(pp=True, world_size=2), "ParallelDims(pp=True): expected a positive int or -1"),
    (dict(dp_shard=2, ep=-1, world_size=2), "ParallelDims(ep=-1): ep cannot be inferred"),
    (dict(dp_shard=2, etp=-1, world_size=2), "ParallelDims(etp=-1): etp cannot be inferred"),
    (dict(ep=0, world_size=2), "ParallelDims(ep=0): expected a positive int"),
    (dict(dp_shard=2, world_size=True), "ParallelDims(world_size=True): expected a positive int"),
    (dict(dp_shard=2, world_size=0), "ParallelDims(world_size=0): expected a positive int"),
    (dict(dp_shard=2, world_size=-1), "ParallelDims(world_size=-1): expected a positive int"),
    (dict(dp_shard=2, ep=4, world_size=2), "ParallelDims(ep=4): must divide dp_shard*cp*tp = 2*1*1 = 2"),
    (dict(dp_shard=1, pp=2, ep=2, world_size=2), "ParallelDims(ep=2): must divide dp_shard*cp*tp = 1*1*1 = 1"),
    (dict(tp=2, etp=4, world_size=4), "ParallelDims(etp=4): expected 1 or tp=2"),
])
def test_every_error_names_the_degree_or_product(kwargs, needle):
    with pytest.raises(ValueError) as err:
        ParallelDims(**kwargs)
    assert needle in str(err.value)


def test_check_degrees_is_the_one_validator():
    assert check_degrees({"dp_shard": -1, "tp": 2})["dp_shard"] == -1  # no world size: values only
    assert check_degrees({"dp_shard": -1, "tp": 2}, world_size=4) == {
        "pp": 1, "dp_replicate": 1, "dp_shard": 2, "cp": 1, "tp": 2, "ep": 1, "etp": 1}
    with pytest.raises(ValueError, match="only one degree may be -1"):
        check_degrees({"dp_shard": -1, "pp": -1})
    with pytest.raises(ValueError, match=r"tp\(2\) = 2 does not match world_size 4"):
        check_degrees({"tp": 2}, world_size=4)  # missing degrees are 1


def test_frozen_and_comparable():
    a, b = ParallelDims(tp=2, world_size=2), ParallelDims(dp_shard=1, tp=2, world_size=2)
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.tp = 4


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


def test_mesh_needs_build_and_a_known_name():
    d = ParallelDims(dp_shard=2, world_size=2)
    with pytest.raises(RuntimeError, match="call build_mesh"):
        d.mesh("dp")
    with pytest.raises(KeyError, match="ParallelDims.mesh\\('dpp'\\): expected one of"):
        d.mesh("dpp")
    assert {"world", "dp", "dp_shard_cp", "dp_cp", "loss", "fsdp", "pp", "tp"} <= set(MESH_NAMES)
