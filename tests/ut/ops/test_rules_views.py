# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: view/shape rules (pure, no processes): dim mapping, accepted/replicated placements, shapes, errors."""
import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.rules.views import index_layout, view_groups, view_placements
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.spec import _local_shape_and_offset

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
T = ("__tensor__", 0)
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "views.yaml")}


def infer(op, shape, placements, /, *args, mesh=(2,), others=(), **kwargs):
    """Run the registered rule of ``op`` on one DTensor (plus ``others``: (shape, placements) tensors)."""
    tensors = [TensorArg(0, tuple(shape), tuple(placements))]
    tensors += [TensorArg(i + 1, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(others)]
    call = OpCall(op, tensors, (T,) + args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


# ---------------------------------------------------------------------- view dim mapping
def test_view_groups_merge_split_and_size_one_dims():
    assert view_groups((4, 6), (24,)) == [([0, 1], [0])]
    assert view_groups((6,), (2, 1, 3)) == [([0], [0, 1, 2])]
    assert view_groups((4, 6), (6, 4)) == [([0, 1], [0, 1])]
    assert view_groups((2, 1, 3), (2, 3)) == [([0], [0]), ([1], []), ([2], [1])]
    assert view_groups((4,), (1, 4)) == [([], [0]), ([0], [1])]
    assert view_groups((1, 4), (4, 1)) == [([0], []), ([1], [0]), ([], [1])]


def test_view_keeps_outer_shard_when_even_and_replicates_otherwise():
    assert view_placements((4, 6), (24,), (S0,), (2,)) == ((S0,), (S0,))
    assert view_placements((4, 6), (24,), (S1,), (2,)) == ((R,), (R,))  # inner dim of a merged group
    assert view_placements((5, 3), (15,), (S0,), (2,)) == ((R,), (R,))  # uneven: 3+2 rows != 8+7 elements
    assert view_placements((6,), (2, 3), (S0,), (2,)) == ((S0,), (S0,))  # split keeps the first factor
    assert view_placements((6,), (3, 2), (S0,), (2,)) == ((R,), (R,))  # first factor 3 does not divide
    assert view_placements((1, 4), (4,), (S0,), (2,)) == ((R,), (R,))  # a sharded size-1 dim
    assert view_placements((4, 1), (4,), (S0,), (2,)) == ((S0,), (S0,))
    assert view_placements((4, 6), (24,), (P,), (2,)) == ((P,), (P,))
    assert view_placements((0, 6), (6, 0), (S1,), (2,)) == ((R,), (R,))
    assert view_placements((5, 3), (5, 1, 3), (S0,), (2,)) == ((S0,), (S0,))  # an unchanged dim: even uneven
    assert view_placements((3, 5), (3, 5, 1), (S1,), (3,)) == ((S1,), (S1,))
    assert view_placements((5, 3), (15,), (S0,), (5,)) == ((S0,), (S0,))  # 5 rows on 5 ranks: 3 elements each


def test_view_nested_shards_on_2d_mesh_keep_the_dividing_prefix():
    assert view_placements((8, 3), (24,), (S0, S0), (2, 2)) == ((S0, S0), (S0, S0))
    assert view_placements((4, 6), (2, 2, 6), (S0, S0), (2, 2)) == ((S0, R), (S0, R))
    assert view_placements((4, 6), (4, 2, 3), (S0, S1), (2, 2)) == ((S0, S1), (S0, S1))
    assert view_placements((4, 6), (24,), (S1, S0), (2, 2)) == ((R, S0), (R, S0))


def _flat_indices(shape, placements, mesh_shape, coord):
    """Global row-major flat indices of the local block at ``coord``, in local row-major order."""
    local, offset = _local_shape_and_offset(tuple(shape), tuple(placements), tuple(mesh_shape), tuple(coord))
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    return [sum((o + i) * s for o, i, s in zip(offset, idx, strides))
            for idx in itertools.product(*[range(n) for n in local])]


_FACTORS = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(_FACTORS, st.data())
def test_view_placements_are_exact_shards(factors, data):
    """Property: running the view on each rank's local block gives exactly that rank's output block."""
    in_shape = tuple(data.draw(st.permutations(factors)))
    cut = sorted(data.draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    perm = data.draw(st.permutations(factors))
    bounds = [0] + cut + [len(perm)]
    out_shape = tuple(math.prod(perm[a:b]) for a, b in zip(bounds, bounds[1:]))
    mesh = data.draw(st.sampled_from([(2,), (3,), (2, 2)]))
    choices = [R, P] + [Shard(k) for k in range(len(in_shape))]
    pl = tuple(data.draw(st.sampled_from(choices)) for _ in mesh)
    need, out = view_placements(in_shape, out_shape, pl, mesh)
    for d, (a, b) in enumerate(zip(pl, need)):
        assert b == a or (isinstance(a, Shard) and b == R), (d, pl, need)
    for coord in itertools.product(*[range(n) for n in mesh]):
        assert _flat_indices(in_shape, need, mesh, coord) == _flat_indices(out_shape, out, mesh, coord), \
            (in_shape, out_shape, pl, need, out, coord)


# ---------------------------------------------------------------------- view-family rules
def test_view_reshape_flatten_unflatten_squeeze_unsqueeze_rules():
    d = infer("Tensor.view", (4, 6), [S0], 2, -1, 6)
    assert d.outputs == ((S0,), (2, 2, 6)) and d.expand == "expand_local_shape" and d.inputs == [(S0,)]
    assert infer("torch.reshape", (4, 6), [S1], (24,)).inputs == [(R,)]
    assert infer("Tensor.reshape", (4, 6), [S0], shape=(8, 3)).outputs == ((S0,), (8, 3))
    d = infer("Tensor.view_as", (4, 6), [S0], ("__tensor__", 1), others=[((24,), None)])
    assert d.outputs == ((S0,), (24,)) and d.inputs == [(S0,), None]
    assert infer("torch.flatten", (4, 4, 2), [S1], 1).outputs == ((S1,), (4, 8))
    assert infer("torch.flatten", (4, 3, 2), [S1], 1).outputs == ((R,), (4, 6))  # 3 rows do not split evenly
    assert infer("torch.flatten", (4, 3, 2), [S1]).outputs == ((R,), (24,))
    assert infer("torch.flatten", (), [R]).outputs == ((R,), (1,))
    assert infer("Tensor.unflatten", (4, 6), [S1], 1, (2, -1)).outputs == ((S1,), (4, 2, 3))
    assert infer("torch.squeeze", (4, 1, 6), [S2]).outputs == ((S1,), (4, 6))
    assert infer("Tensor.squeeze", (4, 1, 6), [S0], (0, 1)).outputs == ((S0,), (4, 6))
    assert infer("Tensor.squeeze", (1, 1, 6), [S2], dim=-2).outputs == ((S1,), (1, 6))
    assert infer("torch.unsqueeze", (4, 6), [S1], 0).outputs == ((S2,), (1, 4, 6))
    assert infer("Tensor.unsqueeze", (4, 6), [P, S0], -1, mesh=(2, 2)).outputs == ((P, S0), (4, 6, 1))


def test_view_errors_name_the_op():
    with pytest.raises(RuleError, match=r"Tensor.view: shape \[5, -1\] is invalid for input of size 24"):
        infer("Tensor.view", (4, 6), [S0], 5, -1)
    with pytest.raises(RuleError, match="at most one -1"):
        infer("Tensor.reshape", (4, 6), [S0], -1, -1)
    with pytest.raises(RuleError, match=r"view\(dtype\)"):
        infer("Tensor.view", (4, 6), [S0], "torch.float16")
    with pytest.raises(RuleError, match="start_dim=1 cannot come after end_dim=0"):
        infer("torch.flatten", (4, 6), [S0], 1, 0)
    with pytest.raises(RuleError, match="out of range"):
        infer("torch.unsqueeze", (4, 6), [S0], 3)


def test_expand_rules():
    d = infer("Tensor.expand", (4, 1), [S0], 3, 4, 5)
    assert d.outputs == ((S1,), (3, 4, 5)) and d.expand == "expand_local_shape"
    assert infer("Tensor.expand", (4, 1), [S1], -1, 5).inputs == [(R,)]  # a broadcast sharded size-1 dim
    assert infer("torch.broadcast_to", (4, 6), [P], (2, 4, 6)).outputs == ((P,), (2, 4, 6))
    d = infer("Tensor.expand_as", (1, 6), [S1], ("__tensor__", 1), others=[((4, 6), None)])
    assert d.outputs == ((S1,), (4, 6))
    with pytest.raises(RuleError, match="cannot expand size 4 of dim 0 to 5"):
        infer("Tensor.expand", (4, 6), [S0], 5, 6)
    with pytest.raises(RuleError, match="smaller than the tensor's rank"):
        infer("Tensor.expand", (4, 6), [S0], 6)


def test_permutations_never_communicate():
    assert infer("Tensor.t", (4, 6), [S0]).outputs == ((S1,), (6, 4))
    assert infer("Tensor.T", (2, 3, 4), [S0]).outputs == ((S2,), (4, 3, 2))
    assert infer("Tensor.mT", (2, 3, 4), [S2, P], mesh=(2, 2)).outputs == ((S1, P), (2, 4, 3))
    assert infer("torch.permute", (2, 3, 4), [S0], (2, 0, 1)).outputs == ((S1,), (4, 2, 3))
    assert infer("Tensor.permute", (2, 3, 4), [S2], 2, 0, 1).outputs == ((S0,), (4, 2, 3))
    assert infer("torch.transpose", (2, 3, 4), [S0], 0, -1).outputs == ((S2,), (4, 3, 2))
    assert infer("torch.movedim", (2, 3, 4), [S0], 0, 2).outputs == ((S2,), (3, 4, 2))
    d = infer("Tensor.movedim", (2, 3, 4), [S1], (0, 1), (2, 0))
    assert d.outputs == ((S0,), (3, 4, 2))
    for op, args in [("Tensor.t", ()), ("torch.permute", ((1, 0, 2),))]:
        assert infer(op, (4, 6) if op == "Tensor.t" else (2, 3, 4), [S0], *args).inputs == [(S0,)]
    with pytest.raises(RuleError, match="torch.t: expects a tensor with <= 2 dimensions"):
        infer("torch.t", (2, 3, 4), [S0])
    with pytest.raises(RuleError, match="is not a permutation"):
        infer("torch.permute", (2, 3), [S0], (0, 0))


def test_narrow_select_split_chunk_unbind():
    assert infer("Tensor.narrow", (4, 6), [S0], 1, 1, 3).outputs == ((S0,), (4, 3))
    assert infer("torch.narrow", (4, 6), [S0], 0, -2, 2).inputs == [(R,)]
    with pytest.raises(RuleError, match="exceeds dimension size"):
        infer("torch.narrow", (4, 6), [S0], 1, 4, 3)
    # a 0-d tensor start: read at run time by the local op on a replicated dim (a DTensor start replicated)
    d = infer("torch.narrow", (4, 6), [S0], 1, T, 3, others=[((), [S0])])
    assert d.inputs == [(S0,), (R,)] and d.outputs == ((S0,), (4, 3))
    assert infer("Tensor.narrow", (4, 6), [S0], 0, T, 2, others=[((), None)]).inputs == [(R,), None]
    with pytest.raises(RuleError, match="a tensor start must be 0-d"):
        infer("torch.narrow", (4, 6), [S0], 1, T, 7, others=[((), None)])
    assert infer("Tensor.select", (4, 6, 2), [S2], 1, -1).outputs == ((S1,), (4, 2))
    assert infer("torch.select", (4, 6), [S0, P], 0, 1, mesh=(2, 2)).inputs == [(R, P)]
    with pytest.raises(RuleError, match="index 6 is out of range"):
        infer("torch.select", (4, 6), [S0], 1, 6)
    d = infer("torch.split", (5, 4), [S1], 2)
    assert d.outputs == [((S1,), (2, 4)), ((S1,), (2, 4)), ((S1,), (1, 4))]
    assert infer("Tensor.split", (5, 4), [S0], [1, 4]).inputs == [(R,)]
    with pytest.raises(RuleError, match=r"split sizes \[1, 3\] do not sum to the dimension size 5"):
        infer("Tensor.split_with_sizes", (5, 4), [S0], [1, 3])
    assert [o[1] for o in infer("torch.chunk", (6, 4), [S1], 4).outputs] == [(2, 4)] * 3  # torch.chunk: 3 chunks
    d = infer("Tensor.unbind", (3, 4), [S1], 0)
    assert d.outputs == [((S0,), (4,))] * 3
    assert infer("torch.unbind", (3, 4), [S1], 1).inputs == [(R,)]


# ---------------------------------------------------------------------- __getitem__
def test_getitem_static_placements():
    assert infer("Tensor.__getitem__", (4, 6), [S0], 1).outputs == ((R,), (6,))
    d = infer("Tensor.__getitem__", (4, 6), [S1], (1, slice(None)))
    assert d.outputs == ((S0,), (6,)) and d.inputs == [(S1,)] and d.expand is None
    d = infer("Tensor.__getitem__", (4, 6), [S0], (None, Ellipsis, slice(1, None), None))
    assert d.outputs == ((S1,), (1, 4, 5, 1))
    assert infer("Tensor.__getitem__", (4, 6), [S0], slice(0, 3)).inputs == [(R,)]
    assert infer("Tensor.__getitem__", (4, 6), [P, S1], (slice(None), 2), mesh=(2, 2)).outputs == ((P, R), (4,))
    d = infer("Tensor.__getitem__", (4, 6), [S0], (slice(None), [0, 5, 5]))
    assert d.outputs == ((S0,), (4, 3))
    d = infer("Tensor.__getitem__", (4, 6), [S1], [True, False, True, True])
    assert d.outputs == ((S1,), (3, 6))


def test_getitem_with_index_tensors_is_dynamic_and_replicates_addressed_dims():
    d = infer("Tensor.__getitem__", (4, 6), [S0], (slice(None), ("__tensor__", 1)), others=[((3,), None)])
    assert d.inputs == [(S0,), (R,)] and d.outputs is None and d.expand == "expand_dynamic"
    d = infer("Tensor.__getitem__", (4, 6, 2), [S2], ("__tensor__", 1), others=[((4, 6), [S0])])
    assert d.inputs == [(S2,), (R,)]  # dim 2 is whole whether the 2-D index is a bool mask or a long index
    d = infer("Tensor.__getitem__", (4, 6, 2), [S1], ("__tensor__", 1), others=[((4, 6), [R])])
    assert d.inputs == [(R,), (R,)]  # a bool mask would cover dims 0-1 (a long index only dim 0)
    d = infer("Tensor.__getitem__", (4, 6, 2), [S2], ("__tensor__", 1), others=[((4,), None)])
    assert d.inputs[0] == (S2,)


def test_getitem_errors():
    with pytest.raises(RuleError, match="index 4 is out of bounds for dimension 0 with size 4"):
        infer("Tensor.__getitem__", (4, 6), [S0], 4)
    with pytest.raises(RuleError, match="too many indices"):
        infer("Tensor.__getitem__", (4, 6), [S0], (0, 0, 0))
    with pytest.raises(RuleError, match="is not supported on a DTensor"):
        infer("Tensor.__getitem__", (4, 6), [S0], "a")
    with pytest.raises(RuleError, match="a single Ellipsis"):
        infer("Tensor.__getitem__", (4, 6), [S0], (Ellipsis, 0, Ellipsis))


_ITEMS = st.one_of(st.just(None), st.just(Ellipsis), st.integers(-2, 1),
                   st.builds(slice, st.sampled_from([None, 0, 1, -1]), st.sampled_from([None, 2, -1]),
                             st.sampled_from([None, 1, 2])),
                   st.sampled_from(["long1", "long2", "bool1"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(_ITEMS, min_size=1, max_size=4), st.sampled_from([(3, 4), (2, 3, 4), (4,)]))
def test_index_layout_matches_torch(items, shape):
    """Property: the pure index layout gives torch's output shape, and kept dims land where torch puts them."""
    import torch  # pylint: disable=import-outside-toplevel
    idx = {"long1": torch.tensor([1, 0]), "long2": torch.tensor([[0], [1]]), "bool1": None}
    real, kinds, consumed, ranks = [], [], [], []
    pos = 0
    for it in items:
        if it == "bool1":
            k = pos if pos < len(shape) else 0
            it = torch.tensor([True, False] + [True] * (shape[k] - 2))
        elif isinstance(it, str):
            it = idx[it]
        real.append(it)
        kind = "none" if it is None else "ellipsis" if it is Ellipsis else "slice" if isinstance(it, slice) else \
            "int" if isinstance(it, int) else "adv"
        kinds.append(kind)
        c = 0 if kind in ("none", "ellipsis") else 1
        consumed.append(c)
        ranks.append(it.dim() if kind == "adv" and it.dtype != torch.bool else 1 if kind == "adv" else 0)
        pos += c
    x = torch.arange(math.prod(shape)).reshape(shape)
    if kinds.count("ellipsis") > 1:  # torch's reading of several Ellipsis is not NumPy's: refused clearly
        with pytest.raises(RuleError, match="a single Ellipsis"):
            index_layout(len(shape), kinds, consumed, max(ranks))
        return
    try:
        want = x[tuple(real)]
    except IndexError:
        return
    dims, adv_at, out_ndim = index_layout(len(shape), kinds, consumed, max(ranks))
    assert out_ndim == want.dim(), (items, shape)
    marker = [k for k, (p, j) in enumerate(dims) if j is not None and (p is None or kinds[p] == "ellipsis")]
    for k in marker:  # a whole dim: tag it and find it again in the result
        probe = torch.zeros(shape)
        probe.select(k, shape[k] - 1).fill_(1.0)
        got = probe[tuple(real)]
        assert got.shape[dims[k][1]] == shape[k]
        assert bool((got.select(dims[k][1], shape[k] - 1) == 1).all()), (items, shape, k)
    if adv_at is not None:
        assert adv_at < out_ndim


def test_setitem_keeps_the_target_placement():
    v = ("__tensor__", 1)
    d = infer("Tensor.__setitem__", (4, 6), [S0], (slice(None), slice(1, 3)), v, others=[((4, 2), None)])
    assert d.inputs == [(S0,), (S0,)] and d.outputs is None and d.expand is None
    d = infer("Tensor.__setitem__", (4, 6), [S0], (slice(None), slice(1, 3)), v, others=[((2,), None)])
    assert d.inputs == [(S0,), (R,)] and d.expand == "expand_setitem" and d.extra["sync"] == [0]
    d = infer("Tensor.__setitem__", (4, 6), [S1], (slice(None), slice(1, 3)), v, others=[((4, 2), [S0])])
    assert d.inputs == [(S1,), (R,)] and d.extra["cut"] == {1: (1, 1)} and d.extra["region"] == (4, 2)
    d = infer("Tensor.__setitem__", (4, 6), [S0], 2, 1.0)
    assert d.inputs == [(S0,)] and d.extra["cut"] == {0: (0, None)}
    d = infer("Tensor.__setitem__", (4, 6), [P], 2, 1.0)
    assert d.extra["zero"] == [0] and d.expand == "expand_setitem"
    d = infer("Tensor.__setitem__", (4, 6), [P, S1], 2, v, mesh=(2, 2), others=[((6,), [R, R])])
    assert d.inputs == [(P, S1), (P, S0)] and d.expand is None
    d = infer("Tensor.__setitem__", (4, 6), [Partial("avg")], 2, v, others=[((6,), None)])
    assert d.inputs == [(Partial("avg"),), (R,)] and d.extra["sync"] == [0]


def test_setitem_refusals():
    with pytest.raises(RuleError, match="sharded on dim 0, which the index addresses with a tensor or list"):
        infer("Tensor.__setitem__", (4, 6), [S0], ("__tensor__", 1), 0.0, others=[((4,), None)])
    with pytest.raises(RuleError, match="writing into a P\\(max\\) target is not supported"):
        infer("Tensor.__setitem__", (4, 6), [Partial("max")], 0, 0.0)
    with pytest.raises(RuleError, match="cannot be broadcast to the region of target dim 0"):
        infer("Tensor.__setitem__", (4, 6), [S0], slice(None), ("__tensor__", 1), others=[((3, 6), None)])
