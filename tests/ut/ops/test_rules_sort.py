# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: sort-family rules (pure, no processes)."""
from pathlib import Path

import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
T = ("__tensor__", 0)
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "sort.yaml")}


def infer(op, shape, placements, *args, mesh=(2,), **kwargs):
    """Run the registered rule of ``op`` on one DTensor."""
    call = OpCall(op, [TensorArg(0, tuple(shape), tuple(placements))], (T,) + args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


def test_sort_and_argsort():
    d = infer("torch.sort", (5, 3), [S1])
    assert d.inputs == [(R,)] and d.outputs == [((R,), (5, 3))] * 2
    d = infer("Tensor.sort", (5, 3), [S1], 0, True)
    assert d.inputs == [(S1,)] and d.outputs == [((S1,), (5, 3))] * 2
    d = infer("torch.argsort", (5, 3, 2), [S0, S2], dim=1, mesh=(2, 2))
    assert d.inputs == [(S0, S2)] and d.outputs == ((S0, S2), (5, 3, 2))
    assert infer("Tensor.argsort", (5, 3), [P]).inputs == [(R,)]
    assert infer("torch.msort", (5, 3), [S0]).inputs == [(R,)]
    assert infer("Tensor.msort", (5, 3), [S1]).outputs == ((S1,), (5, 3))


def test_topk_kthvalue_median_shapes():
    d = infer("torch.topk", (5, 3), [S0], 2)
    assert d.outputs == [((S0,), (5, 2))] * 2
    d = infer("Tensor.topk", (5, 3), [S0], 4, dim=0)
    assert d.inputs == [(R,)] and d.outputs == [((R,), (4, 3))] * 2
    d = infer("torch.kthvalue", (5, 3, 2), [S2], 1, 1)
    assert d.outputs == [((S1,), (5, 2))] * 2
    assert infer("Tensor.kthvalue", (5, 3, 2), [S2], 1, 1, True).outputs == [((S2,), (5, 1, 2))] * 2
    assert infer("torch.kthvalue", (5, 3), [S0], 2).outputs == [((S0,), (5,))] * 2  # default dim -1
    assert infer("torch.median", (5, 3), [S0]).outputs == ((R,), ())
    assert infer("torch.median", (5, 3), [S0]).inputs == [(R,)]
    assert infer("Tensor.median", (5, 3), [S1], 0).outputs == [((S0,), (3,))] * 2


def test_rejections_name_the_op():
    with pytest.raises(RuleError, match=r"torch.topk: k=4 must be an int in \[0, 3\] \(size of dim 1\)"):
        infer("torch.topk", (5, 3), [S0], 4)
    with pytest.raises(RuleError, match="torch.sort: dim=3 is out of range for a 2-D tensor"):
        infer("torch.sort", (5, 3), [S0], 3)
    with pytest.raises(RuleError, match=r"torch.argsort: dim must be an int, got \(0, 1\)"):
        infer("torch.argsort", (5, 3), [S0], (0, 1))
    with pytest.raises(ValueError, match="kind='heap'"):
        RULES["torch.sort"].rule_instance().__class__("op", kind="heap")
