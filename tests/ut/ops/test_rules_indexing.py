# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: gather/scatter/index/masked/one_hot/embedding rules (pure, no processes)."""
from pathlib import Path

import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "indexing.yaml")}


def t(i):
    """The placeholder of tensor slot ``i``."""
    return ("__tensor__", i)


def infer(op, tensors, *args, mesh=(2,), **kwargs):
    """Run the registered rule of ``op``; ``tensors`` are (shape, placements|None) in slot order."""
    targs = [TensorArg(i, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(tensors)]
    call = OpCall(op, targs, args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


def test_gather_and_take_along_dim():
    d = infer("torch.gather", [((4, 6), [S0]), ((4, 2), [R])], t(0), 1, t(1))
    assert d.inputs == [(S0,), (S0,)] and d.outputs == ((S0,), (4, 2))
    d = infer("torch.gather", [((4, 6), [R]), ((4, 2), [S1])], t(0), 1, t(1))
    assert d.inputs == [(R,), (S1,)] and d.outputs == ((S1,), (4, 2))  # index shard on the gathered dim
    d = infer("torch.gather", [((5, 6), [R]), ((4, 2), [S0])], t(0), 1, t(1))
    assert d.inputs == [(R,), (R,)]  # rows index x positionally: x (5 rows) cannot follow a 4-row shard
    d = infer("Tensor.gather", [((4, 6), [S1]), ((4, 6), [R])], t(0), 1, t(1))
    assert d.inputs == [(R,), (R,)]
    d = infer("torch.gather", [((4, 6), [P]), ((4, 2), [R])], t(0), 1, t(1))
    assert d.outputs == ((P,), (4, 2))
    d = infer("torch.take_along_dim", [((4, 6), [R]), ((1, 2), [S1])], t(0), t(1), 1)
    assert d.outputs == ((S1,), (4, 2))
    d = infer("torch.take_along_dim", [((4, 6), [S0]), ((1, 2), [R])], t(0), t(1), dim=1)
    assert d.inputs == [(S0,), (R,)] and d.outputs == ((S0,), (4, 2))
    d = infer("Tensor.take_along_dim", [((4, 6), [S0]), ((5,), [R])], t(0), t(1))
    assert d.inputs == [(R,), (R,)] and d.outputs == ((R,), (5,))
    with pytest.raises(RuleError, match="torch.gather: index has 1 dims but input has 2"):
        infer("torch.gather", [((4, 6), [S0]), ((4,), [R])], t(0), 1, t(1))
    with pytest.raises(RuleError, match="exceeds input"):
        infer("torch.gather", [((4, 6), [S0]), ((5, 2), [R])], t(0), 1, t(1))


def test_scatter_family():
    d = infer("torch.scatter", [((4, 6), [S0]), ((4, 6), [R]), ((4, 6), [R])], t(0), 1, t(1), t(2))
    assert d.inputs == [(S0,), (S0,), (S0,)] and d.outputs == ((S0,), (4, 6))
    d = infer("torch.scatter", [((4, 6), [P]), ((4, 6), [R]), ((4, 6), [R])], t(0), 1, t(1), t(2))
    assert d.inputs == [(P,), (R,), (P,)] and d.outputs == ((P,), (4, 6))  # src made partial locally
    d = infer("Tensor.scatter", [((4, 6), [P]), ((4, 6), [R])], t(0), 1, t(1), 0.5)
    assert d.inputs == [(R,), (R,)]  # a scalar value would be written on every rank
    d = infer("Tensor.scatter", [((4, 6), [P]), ((4, 6), [R]), ((4, 6), [R])], t(0), 1, t(1), t(2),
              reduce="multiply")
    assert d.outputs == ((R,), (4, 6))
    d = infer("torch.scatter", [((4, 6), [R]), ((4, 6), [S1]), ((4, 6), [R])], t(0), 1, t(1), t(2))
    assert d.inputs == [(R,), (R,), (R,)]  # overwrite with the indices split: not combinable
    d = infer("torch.scatter_add", [((4, 6), [R]), ((4, 6), [S1]), ((4, 6), [R])], t(0), 1, t(1), t(2))
    assert d.inputs == [(P,), (S1,), (S1,)] and d.outputs == ((P,), (4, 6))  # each rank adds its share
    d = infer("torch.index_add", [((5, 3), [R]), ((4,), [S0]), ((4, 3), [R])], t(0), 0, t(1), t(2))
    assert d.inputs == [(P,), (S0,), (S0,)] and d.outputs == ((P,), (5, 3))
    d = infer("Tensor.index_add", [((5, 3), [S1]), ((4,), [R]), ((4, 3), [R])], t(0), 0, t(1), t(2), alpha=2)
    assert d.inputs == [(S1,), (R,), (S1,)] and d.outputs == ((S1,), (5, 3))
    d = infer("torch.scatter_add", [((4, 6), [S0, S1]), ((4, 6), [R, R]), ((4, 6), [R, P])], t(0), 1, t(1), t(2),
              mesh=(2, 2))
    assert d.inputs == [(S0, P), (S0, R), (S0, P)] and d.outputs == ((S0, P), (4, 6))  # x joins the partial src
    with pytest.raises(RuleError, match="index_add needs a 1-D index"):
        infer("torch.index_add", [((5, 3), [R]), ((4, 1), [S0]), ((4, 3), [R])], t(0), 0, t(1), t(2))


def test_index_select_and_masked_ops():
    d = infer("torch.index_select", [((5, 3), [S1]), ((4,), [S0])], t(0), 0, t(1))
    assert d.inputs == [(S1,), (R,)] and d.outputs == ((S1,), (4, 3))
    d = infer("Tensor.index_select", [((5, 3), [S0]), ((4,), [S0])], t(0), 0, t(1))
    assert d.inputs == [(R,), (S0,)] and d.outputs == ((S0,), (4, 3))
    d = infer("torch.index_select", [((5, 3), [P]), ((4,), [R])], t(0), 1, t(1))
    assert d.outputs == ((P,), (5, 4))
    with pytest.raises(RuleError, match="1-D"):
        infer("torch.index_select", [((5, 3), [P]), ((4, 2), [R])], t(0), 1, t(1))
    d = infer("torch.masked_scatter", [((4, 6), [S0]), ((4, 6), [S0]), ((24,), [R])], t(0), t(1), t(2))
    assert d.inputs == [(R,), (R,), (R,)] and d.outputs == ((R,), (4, 6))
    d = infer("Tensor.masked_scatter", [((4, 6), [P]), ((6,), [R]), ((24,), None)], t(0), t(1), t(2))
    assert d.inputs == [(P,), (R,), (P,)] and d.outputs == ((P,), (4, 6))
    d = infer("torch.masked_select", [((4, 6), [S1]), ((4, 6), [S1])], t(0), t(1))
    assert d.inputs == [(R,), (R,)] and d.outputs is None and d.expand == "expand_dynamic"
    assert infer("Tensor.masked_select", [((4, 6), [P]), ((4, 6), [R])], t(0), t(1)).inputs == [(P,), (R,)]


def test_one_hot():
    d = infer("torch.nn.functional.one_hot", [((4, 5), [S1])], t(0), 7)
    assert d.inputs == [(S1,)] and d.outputs == ((S1,), (4, 5, 7))
    d = infer("torch.nn.functional.one_hot", [((4, 5), [S1])], t(0))
    assert d.inputs == [(R,)] and d.outputs is None and d.expand == "expand_dynamic"


def test_embedding_placements():
    ids, weight = ((3, 5), [R]), ((10, 8), [S0])
    d = infer("torch.nn.functional.embedding", [ids, weight], t(0), t(1))
    assert d.inputs == [(R,), (S0,)] and d.outputs == ((P,), (3, 5, 8)) and d.expand == "expand_vocab"
    d = infer("torch.nn.functional.embedding", [((3, 5), [S0]), ((10, 8), [S1])], t(0), t(1))
    assert d.inputs == [(R,), (S1,)] and d.outputs == ((S2,), (3, 5, 8)) and d.expand is None
    d = infer("torch.nn.functional.embedding", [((3, 5), [S1]), ((10, 8), [R])], t(0), t(1))
    assert d.inputs == [(S1,), (R,)] and d.outputs == ((S1,), (3, 5, 8))
    d = infer("torch.nn.functional.embedding", [((3, 5), None), ((10, 8), [P])], t(0), t(1))
    assert d.outputs == ((P,), (3, 5, 8))
    d = infer("torch.embedding", [((10, 8), [S0, S1]), ((3, 5), [S0, R])], t(0), t(1), mesh=(2, 2))
    assert d.inputs == [(S0, S1), (R, R)] and d.outputs == ((P, S2), (3, 5, 8)) and d.expand == "expand_vocab"
    d = infer("torch.nn.functional.embedding", [((3, 5), [S0]), ((10, 8), [S0])], t(0), t(1), None, 1.0)
    assert d.inputs == [(R,), (R,)]  # max_norm renormalises rows in place: everything replicated
    d = infer("torch.nn.functional.embedding", [((3, 5), [S0]), ((10, 8), [S0])], t(0), t(1),
              scale_grad_by_freq=True)
    assert d.inputs == [(R,), (R,)] and d.expand is None


def test_embedding_errors():
    with pytest.raises(RuleError, match="torch.nn.functional.embedding: sparse=True is not supported"):
        infer("torch.nn.functional.embedding", [((3, 5), [R]), ((10, 8), [S0])], t(0), t(1), sparse=True)
    with pytest.raises(RuleError, match=r"weight must be 2-D \(num_embeddings, dim\), got shape \[10\]"):
        infer("torch.embedding", [((10,), [S0]), ((3, 5), [R])], t(0), t(1))
