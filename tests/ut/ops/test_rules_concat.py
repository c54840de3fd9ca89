# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: cat/stack, pad, repeat family, tril/triu, flip/roll, diagonal rules (pure, no processes)."""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
T = ("__tensor__", 0)
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "concat.yaml")}


def infer(op, shape, placements, /, *args, mesh=(2,), others=(), **kwargs):
    """Run the registered rule of ``op`` on one DTensor (plus ``others``: (shape, placements) tensors)."""
    tensors = [TensorArg(0, tuple(shape), tuple(placements))]
    tensors += [TensorArg(i + 1, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(others)]
    call = OpCall(op, tensors, (T,) + args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


def infer_seq(op, specs, *args, mesh=(2,), **kwargs):
    """Run the rule of a sequence op (cat/stack) on tensors given as (shape, placements|None)."""
    tensors = [TensorArg(i, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(specs)]
    seq = [("__tensor__", i) for i in range(len(specs))]
    call = OpCall(op, tensors, (seq,) + args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


def test_cat_and_stack_placements():
    d = infer_seq("torch.cat", [((4, 6), [S1]), ((2, 6), [R])])
    assert d.inputs == [(S1,), (S1,)] and d.outputs == ((S1,), (6, 6))
    d = infer_seq("torch.cat", [((4, 6), [S0]), ((2, 6), [S0])], 0)
    assert d.inputs == [(R,), (R,)] and d.outputs == ((R,), (6, 6))  # the cat dim itself is replicated
    d = infer_seq("torch.concat", [((4, 6), [S0]), ((4, 2), [R])], dim=-1)
    assert d.outputs == ((S0,), (4, 8))
    d = infer_seq("torch.cat", [((4, 6), [P]), ((4, 6), None)])
    assert d.inputs == [(P,), (P,)] and d.outputs == ((P,), (8, 6))  # the plain tensor is made partial locally
    d = infer_seq("torch.cat", [((4, 6), [P]), ((4, 6), [Partial("max")])])
    assert d.outputs == ((R,), (8, 6))
    d = infer_seq("torch.stack", [((4, 6), [S1]), ((4, 6), [S1])], 1)
    assert d.outputs == ((S2,), (4, 2, 6))
    d = infer_seq("torch.stack", [((4, 6), [S0, P]), ((4, 6), [R, P])], -1, mesh=(2, 2))
    assert d.inputs == [(S0, P), (S0, P)] and d.outputs == ((S0, P), (4, 6, 2))


def test_cat_errors():
    with pytest.raises(RuleError, match=r"torch.cat: tensor 1 has shape \[2, 5\], incompatible with \[4, 6\]"):
        infer_seq("torch.cat", [((4, 6), [S1]), ((2, 5), [R])])
    with pytest.raises(RuleError, match="torch.stack: tensor 1 has shape"):
        infer_seq("torch.stack", [((4, 6), [S1]), ((2, 6), [R])])
    with pytest.raises(RuleError, match="out of range"):
        infer_seq("torch.cat", [((4, 6), [S1])], 2)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(0, 1), st.data())
def test_cat_never_keeps_a_shard_on_the_cat_dim(n, dim, data):
    """Property: all inputs share one target per mesh dim, and it is never a shard of the cat dim."""
    choices = [R, P, S0, S1, Partial("avg"), None]
    specs = [((3 + i, 4) if dim == 0 else (4, 3 + i), data.draw(st.sampled_from(choices))) for i in range(n)]
    specs = [(s, None if p is None else [p]) for s, p in specs]
    d = infer_seq("torch.cat", specs, dim)
    out = d.outputs[0][0]
    assert out != Shard(dim)
    for need in d.inputs:
        assert need[0] == out or (isinstance(out, Partial) and isinstance(need[0], Partial))


def test_pad_repeat_tile_and_repeat_interleave():
    assert infer("torch.nn.functional.pad", (4, 6), [S0], (1, 2)).outputs == ((S0,), (4, 9))
    assert infer("torch.nn.functional.pad", (4, 6), [S1], (1, 2)).inputs == [(R,)]
    assert infer("torch.nn.functional.pad", (4, 6), [P], (1, 1)).outputs == ((P,), (4, 8))
    assert infer("torch.nn.functional.pad", (4, 6), [P], (1, 1), value=2.0).inputs == [(R,)]
    assert infer("torch.nn.functional.pad", (4, 6), [S1], (0, 0, 1, 1), "reflect").outputs == ((S1,), (6, 6))
    # reflect/replicate kernels refuse empty dims: a dim smaller than the mesh is gathered (a rank's shard is empty)
    assert infer("torch.nn.functional.pad", (1, 6), [S0], (1, 1), "replicate").inputs == [(R,)]
    assert infer("torch.nn.functional.pad", (1, 6), [S0], (1, 1)).inputs == [(S0,)]  # constant: empty is fine
    with pytest.raises(RuleError, match="pad must be a sequence of 2\\*k ints"):
        infer("torch.nn.functional.pad", (4, 6), [S1], (1,))
    assert infer("Tensor.repeat", (4, 6), [S0], 1, 2).outputs == ((S0,), (4, 12))
    assert infer("Tensor.repeat", (4, 6), [S1], 2, 3, 1).outputs == ((S2,), (2, 12, 6))
    assert infer("Tensor.repeat", (4, 6), [S0], (2, 1)).inputs == [(R,)]
    with pytest.raises(RuleError, match="can not be smaller than the tensor's rank"):
        infer("Tensor.repeat", (4, 6), [S0], 2)
    assert infer("torch.tile", (4, 6), [S0], (2,)).outputs == ((S0,), (4, 12))
    assert infer("Tensor.repeat_interleave", (4, 6), [S0], 2, 0).outputs == ((S0,), (8, 6))
    assert infer("Tensor.repeat_interleave", (5, 6), [S0], 2, 0).inputs == [(R,)]  # uneven: shard would move
    assert infer("torch.repeat_interleave", (5, 6), [S1, P], 3, mesh=(2, 2)).outputs == ((R, P), (90,))
    d = infer("torch.repeat_interleave", (5, 6), [S0], ("__tensor__", 1), 1, others=[((6,), None)])
    assert d.inputs == [(S0,), (R,)] and d.outputs is None and d.expand == "expand_dynamic"
    with pytest.raises(RuleError, match="repeats-only form"):
        infer("torch.repeat_interleave", (5,), [S0])


def test_triangles_keep_any_sharding_with_a_shifted_diagonal():
    d = infer("torch.tril", (5, 7), [S0])
    assert d.inputs == [(S0,)] and d.outputs == ((S0,), (5, 7)) and d.expand == "expand_shifted"
    assert infer("Tensor.triu", (2, 5, 7), [S0], 1).expand is None  # batch shard: the local op is exact
    assert infer("Tensor.triu", (5, 7), [P, S1], mesh=(2, 2)).outputs == ((P, S1), (5, 7))
    with pytest.raises(RuleError, match="at least 2 dimensions"):
        infer("torch.tril", (5,), [S0])


def test_flip_roll_diagonal_diag_embed():
    assert infer("torch.flip", (4, 6), [S0], (1,)).outputs == ((S0,), (4, 6))
    assert infer("Tensor.flip", (4, 6), [S0], 0, 1).inputs == [(R,)]
    assert infer("torch.fliplr", (4, 6), [S1]).inputs == [(R,)]
    assert infer("torch.flipud", (4, 6), [S1]).inputs == [(S1,)]
    assert infer("torch.roll", (4, 6), [S0], 1, 1).inputs == [(S0,)]
    assert infer("torch.roll", (4, 6), [S0], 1).inputs == [(R,)]  # flattened roll
    assert infer("Tensor.roll", (4, 6), [P], (1, 1), (0, 1)).outputs == ((P,), (4, 6))
    d = infer("torch.diagonal", (3, 4, 5), [S0], 0, 1, 2)
    assert d.outputs == ((S0,), (3, 4))
    d = infer("Tensor.diagonal", (3, 4, 5), [S2], -1)
    assert d.inputs == [(S2,)] and d.outputs == ((S0,), (5, 2))
    assert infer("torch.diagonal", (3, 4), [S1]).inputs == [(R,)]
    with pytest.raises(RuleError, match="cannot be identical"):
        infer("torch.diagonal", (3, 4), [S1], 0, 1, 1)
    d = infer("torch.diag_embed", (3, 4), [S0], 1)
    assert d.outputs == ((S0,), (3, 5, 5))
    d = infer("torch.diag_embed", (3, 4), [S0], 0, 0, 2)
    assert d.outputs == ((S1,), (4, 3, 4))
    assert infer("torch.diag_embed", (3, 4), [S1]).inputs == [(R,)]
