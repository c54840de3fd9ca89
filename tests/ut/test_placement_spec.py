# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: placements, mesh topology, spec hashing/interning, uneven shard math, Layout."""
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel import Layout, Partial, Replicate, Shard
from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.placement import chunk_sizes, shard_range
from hyper_parallel.core.spec import DTensorSpec, normalize_placements


def test_placements_are_value_singletons_and_pickle():
    assert Shard(1) is Shard(1) and Shard(0) is not Shard(1)
    assert Replicate() is Replicate()
    assert Partial("avg") is Partial("avg") and Partial() is Partial("sum")
    for p in (Shard(2), Replicate(), Partial("max")):
        assert pickle.loads(pickle.dumps(p)) is p
    assert Shard(0).is_shard() and Shard(0).is_shard(0) and not Shard(0).is_shard(1)
    assert Replicate().is_replicate() and Partial().is_partial()
    with pytest.raises(AttributeError):
        Shard(0).dim = 3


def test_placement_bad_input():
    with pytest.raises(ValueError, match="reduce_op"):
        Partial("prod")
    with pytest.raises(TypeError, match="dim must be an int"):
        Shard("0")


@given(size=st.integers(0, 40), parts=st.integers(1, 9))
def test_chunk_sizes_match_torch_chunk_semantics(size, parts):
    sizes = chunk_sizes(size, parts)
    assert len(sizes) == parts and sum(sizes) == size
    step = -(-size // parts) if size else 0
    # torch.chunk: every non-empty chunk has `step` elements except possibly the last non-empty one
    non_empty = [s for s in sizes if s]
    assert all(s == step for s in non_empty[:-1])
    assert sizes == tuple(sorted(sizes, reverse=True))
    offsets = [shard_range(size, parts, i)[0] for i in range(parts)]
    assert offsets == [min(i * step, size) for i in range(parts)]


def test_mesh_topology_groups_and_coords():
    topo = MeshTopology((2, 3), dim_names=("dp", "tp"))
    assert topo.groups_along(1) == [(0, 1, 2), (3, 4, 5)]
    assert topo.groups_along(0) == [(0, 3), (1, 4), (2, 5)]
    assert topo.groups_along((0, 1)) == [(0, 1, 2, 3, 4, 5)]
    assert topo.coordinate_of(4) == (1, 1) and topo.coordinate_of(9) is None
    assert topo.rank_at((1, 2)) == 5
    assert topo.dim_index("tp") == 1 and topo.dim_index(-1) == 1
    sub = topo.sub([1], 4)
    assert sub.ranks == (3, 4, 5) and sub.dim_names == ("tp",)
    with pytest.raises(KeyError, match="no dimension named 'pp'"):
        topo.dim_index("pp")
    with pytest.raises(ValueError, match="needs 6 ranks"):
        MeshTopology((2, 3), ranks=range(5))
    with pytest.raises(ValueError, match="one name per mesh dim"):
        MeshTopology((2, 3), dim_names=("dp",))


def test_spec_interning_hash_and_validation():
    mesh = MeshTopology((2,))
    a = DTensorSpec(mesh, [Shard(-1)], (4, 6))
    b = DTensorSpec(MeshTopology((2,)), (Shard(1),), [4, 6])
    assert a is b and hash(a) == hash(b)
    assert DTensorSpec(mesh, [Shard(0)], (4, 6)) is not a
    assert pickle.loads(pickle.dumps(a)) is a
    with pytest.raises(ValueError, match="expected 1 placement"):
        DTensorSpec(mesh, [Shard(0), Replicate()], (4,))
    with pytest.raises(ValueError, match="out of range for a 2-D tensor"):
        DTensorSpec(mesh, [Shard(2)], (4, 6))
    with pytest.raises(TypeError, match="Shard/Replicate/Partial"):
        normalize_placements(["S0"], 1, 2)


mesh_shapes = st.sampled_from([(2,), (3,), (4,), (2, 2), (2, 3), (2, 2, 2)])


@st.composite
def spec_cases(draw):
    mshape = draw(mesh_shapes)
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    pl = [draw(st.sampled_from([Replicate(), Partial()] + [Shard(i) for i in range(ndim)])) for _ in mshape]
    return DTensorSpec(MeshTopology(mshape), pl, shape)


def _tiles(spec):
    topo = spec.mesh
    return [spec.local_shape_and_offset(topo.coordinate_of(r)) for r in topo.ranks]


@given(spec=spec_cases())
@settings(max_examples=300, deadline=None)
def test_local_shards_tile_the_global_tensor(spec):
    """Shards of every coordinate cover each global element exactly (times the replication factor)."""
    import itertools
    counts = {}
    for local, offset in _tiles(spec):
        for idx in itertools.product(*[range(o, o + n) for o, n in zip(offset, local)]):
            counts[idx] = counts.get(idx, 0) + 1
    repl = 1
    for d, p in enumerate(spec.placements):
        if not isinstance(p, Shard):
            repl *= spec.mesh.shape[d]
    everything = set(itertools.product(*[range(s) for s in spec.shape]))
    assert set(counts) == everything
    assert all(c == repl for c in counts.values())
    biggest = max((_prod(local) for local, _ in _tiles(spec)), default=0)
    assert spec.max_local_numel() >= biggest


def _prod(shape):
    out = 1
    for s in shape:
        out *= s
    return out


def test_nested_shard_offsets():
    spec = DTensorSpec(MeshTopology((2, 2)), [Shard(0), Shard(0)], (7, 2))
    # outer split 7 -> 4 + 3, inner split 4 -> 2 + 2 and 3 -> 2 + 1
    assert [spec.local_shape_and_offset(c) for c in [(0, 0), (0, 1), (1, 0), (1, 1)]] == [
        ((2, 2), (0, 0)), ((2, 2), (2, 0)), ((2, 2), (4, 0)), ((1, 2), (6, 0))]
    assert spec.tensor_map() == ((1, 0), -1)


def test_layout_roundtrip_with_placements():
    layout = Layout((2, 4), ("dp", "tp"))
    bound = layout("tp", ("None"))
    assert bound.placements == (Replicate(), Shard(0))
    assert bound.tensor_map == (0, -1)
    nested = layout(("dp", "tp"), "None")
    assert nested.placements == (Shard(0), Shard(0)) and nested.tensor_map == ((1, 0), -1)
    back = Layout.from_placements((2, 4), ("dp", "tp"), (Partial(), Shard(1)), 2)
    assert back.placements == (Partial(), Shard(1))
    with pytest.raises(ValueError, match="outermost first"):
        layout(("tp", "dp"), "None")
    with pytest.raises(ValueError, match="unknown alias"):
        layout("pp", "None")
    with pytest.raises(ValueError, match="more than one tensor dim"):
        layout("dp", "dp")
