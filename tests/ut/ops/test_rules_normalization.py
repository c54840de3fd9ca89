# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: softmax and normalisation rules (pure, no processes)."""
from pathlib import Path

import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "normalization.yaml")}


def t(slot):
    """Placeholder of tensor ``slot``."""
    return ("__tensor__", slot)


def infer(op, tensors, args, kwargs=None, mesh=(2,)):
    """``tensors``: (shape, placements or None) per slot; ``args`` use :func:`t` placeholders."""
    targs = [TensorArg(i, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(tensors)]
    return RULES[op].rule_instance().infer(OpCall(op, targs, tuple(args), dict(kwargs or {}), tuple(mesh)))


def test_softmax_replicates_only_the_softmax_dim():
    d = infer("torch.softmax", [((4, 6), [S1])], [t(0), 1])
    assert d.inputs == [(R,)] and d.outputs == ((R,), (4, 6))
    d = infer("Tensor.log_softmax", [((4, 6), [S0])], [t(0)], {"dim": -1})
    assert d.inputs == [(S0,)] and d.outputs == ((S0,), (4, 6))
    d = infer("torch.softmax", [((4, 6, 2), [S0, S2])], [t(0), 1], mesh=(2, 2))
    assert d.outputs == ((S0, S2), (4, 6, 2))
    assert infer("torch.log_softmax", [((4, 6), [P])], [t(0), 0]).inputs == [(R,)]


def test_functional_softmax_legacy_implicit_dim():
    assert infer("torch.nn.functional.softmax", [((3, 4, 2), [S1])], [t(0)]).outputs == ((S1,), (3, 4, 2))
    assert infer("torch.nn.functional.log_softmax", [((4, 5), [S1])], [t(0), None]).inputs == [(R,)]
    with pytest.raises(RuleError, match=r"torch.softmax: dim must be an int, got None"):
        infer("torch.softmax", [((4, 5), [S1])], [t(0)])
    with pytest.raises(RuleError, match=r"Tensor.softmax: dim=2 is out of range for a 2-D tensor"):
        infer("Tensor.softmax", [((4, 5), [S1])], [t(0), 2])


def test_layer_and_rms_norm():
    d = infer("torch.nn.functional.layer_norm", [((4, 6), [S0]), ((6,), [S0]), ((6,), None)],
              [t(0), (6,), t(1), t(2)])
    assert d.inputs == [(S0,), (R,), (R,)] and d.outputs == ((S0,), (4, 6))
    d = infer("torch.layer_norm", [((4, 6, 2), [S1, S2])], [t(0), [6, 2]], mesh=(2, 2))
    assert d.inputs == [(R, R)]
    d = infer("torch.nn.functional.rms_norm", [((4, 6, 2), [S1]), ((2,), [R])], [t(0), [2], t(1)])
    assert d.outputs == ((S1,), (4, 6, 2)) and d.inputs == [(S1,), (R,)]
    assert infer("torch.rms_norm", [((4, 6), [P])], [t(0), [6]]).inputs == [(R,)]
    with pytest.raises(RuleError, match=r"normalized_shape \[5\] does not match the trailing dims of input shape"):
        infer("torch.nn.functional.layer_norm", [((4, 6), [S0])], [t(0), [5]])
    with pytest.raises(RuleError, match="normalized_shape must be a list of ints"):
        infer("torch.nn.functional.rms_norm", [((4, 6), [S0])], [t(0), "6"])


def test_group_norm_keeps_only_the_batch_shard():
    d = infer("torch.nn.functional.group_norm", [((4, 6, 3), [S0]), ((6,), [S0])], [t(0), 2, t(1)])
    assert d.inputs == [(S0,), (R,)] and d.outputs == ((S0,), (4, 6, 3))
    assert infer("torch.group_norm", [((4, 6, 3), [S2])], [t(0), 3]).inputs == [(R,)]


def test_batch_norm_eval_and_training():
    shapes = [((4, 6, 3), [S1]), ((6,), None), ((6,), None), ((6,), [R]), ((6,), [R])]
    d = infer("torch.nn.functional.batch_norm", shapes, [t(0), t(1), t(2), t(3), t(4)])
    assert d.inputs == [(S1,)] + [(S0,)] * 4 and d.outputs == ((S1,), (4, 6, 3))
    d = infer("torch.nn.functional.batch_norm", [((4, 6, 3), [S0]), ((6,), None), ((6,), None)],
              [t(0), t(1), t(2)])
    assert d.inputs == [(S0,), (R,), (R,)] and d.outputs == ((S0,), (4, 6, 3))
    d = infer("torch.nn.functional.batch_norm", [((4, 6, 3), [S0]), ((6,), None), ((6,), None)],
              [t(0), t(1), t(2)], {"training": True})
    assert d.inputs == [(R,), (R,), (R,)] and d.outputs == ((R,), (4, 6, 3))
    d = infer("torch.batch_norm", [((4, 6), [S1]), ((6,), [R]), ((6,), [S0]), ((6,), [S0])],
              [t(0), t(1), None, t(2), t(3), True, 0.1, 1e-5, False])
    assert d.inputs == [(S1,), (S0,), (S0,), (S0,)]
    with pytest.raises(RuleError, match=r"torch.nn.functional.batch_norm: training mode updates running_var in "
                                        r"place, but it is \['R'\] and the input layout needs \['S\(0\)'\]"):
        infer("torch.nn.functional.batch_norm", [((4, 6), [S1]), ((6,), [S0]), ((6,), [R])], [t(0), t(1), t(2)],
              {"training": True})
    with pytest.raises(RuleError, match="input must be a tensor of at least 2 dims"):
        infer("torch.nn.functional.batch_norm", [((6,), [S0])], [t(0), None, None])
    with pytest.raises(ValueError, match="signature='x'"):
        RULES["torch.batch_norm"].rule_instance().__class__("op", signature="x")
