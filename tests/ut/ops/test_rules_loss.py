# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: loss rules (pure, no processes): batch shards, class dim, reductions and denominators."""
from pathlib import Path

import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "loss.yaml")}
F = "torch.nn.functional."


def t(slot):
    """Placeholder of tensor ``slot``."""
    return ("__tensor__", slot)


def infer(op, tensors, args, kwargs=None, mesh=(2,)):
    """``tensors``: (shape, placements or None) per slot; ``args`` use :func:`t` placeholders."""
    targs = [TensorArg(i, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(tensors)]
    return RULES[F + op].rule_instance().infer(OpCall(F + op, targs, tuple(args), dict(kwargs or {}), tuple(mesh)))


def test_cross_entropy_batch_sharded_reductions():
    two = [((6, 5), [S0]), ((6,), [S0])]
    d = infer("cross_entropy", two, [t(0), t(1)])
    assert d.inputs == [(S0,), (S0,)] and d.outputs == ((P,), ()) and d.expand == "expand_mean"
    assert d.extra == {"mesh_dims": (0,), "denominator": None}  # ignore_index: counted at run time
    d = infer("cross_entropy", two, [t(0), t(1)], {"reduction": "sum"})
    assert d.outputs == ((P,), ()) and d.expand is None
    d = infer("cross_entropy", two, [t(0), t(1)], {"reduction": "none"})
    assert d.outputs == ((S0,), (6,)) and d.expand is None


def test_cross_entropy_class_dim_and_target_shards():
    d = infer("cross_entropy", [((6, 5), [S1]), ((6,), [R])], [t(0), t(1)])
    assert d.inputs == [(R,), (R,)] and d.outputs == ((R,), ()) and d.expand is None
    d = infer("cross_entropy", [((6, 5), [S1]), ((6,), [S0])], [t(0), t(1)])  # follow the target's batch shard
    assert d.inputs == [(S0,), (S0,)] and d.outputs == ((P,), ())
    d = infer("nll_loss", [((6, 5, 3), [S2]), ((6, 3), None), ((5,), [S0])], [t(0), t(1), t(2)],
              {"reduction": "none"})
    assert d.inputs == [(S2,), (S1,), (R,)] and d.outputs == ((S1,), (6, 3))
    d = infer("nll_loss", [((6, 5, 3), [S0, S2]), ((6, 3), [R, R])], [t(0), t(1)], mesh=(2, 2))
    assert d.outputs == ((P, P), ()) and d.extra["mesh_dims"] == (0, 1)
    d = infer("cross_entropy", [((5,), [S0]), ((), [R])], [t(0), t(1)])  # unbatched: nothing to keep
    assert d.inputs == [(R,), (R,)] and d.outputs == ((R,), ())
    assert infer("cross_entropy", [((6, 5), [P]), ((6,), [R])], [t(0), t(1)]).inputs == [(R,), (R,)]


def test_cross_entropy_probability_targets_have_a_static_denominator():
    d = infer("cross_entropy", [((6, 5, 2), [S0]), ((6, 5, 2), [R])], [t(0), t(1)], {"label_smoothing": 0.1})
    assert d.inputs == [(S0,), (S0,)] and d.extra["denominator"] == 12 and d.expand == "expand_mean"
    d = infer("cross_entropy", [((6, 5, 2), [R]), ((6, 5, 2), [S1])], [t(0), t(1)])
    assert d.inputs == [(R,), (R,)]  # the class dim of a probability target is not a batch dim


def test_legacy_reduction_arguments():
    two = [((6, 5), [S0]), ((6,), [S0])]
    assert infer("nll_loss", two, [t(0), t(1), None, False]).expand is None  # size_average=False: sum
    assert infer("nll_loss", two, [t(0), t(1)], {"reduce": False}).outputs == ((S0,), (6,))
    assert infer("mse_loss", [((6, 5), [S0]), ((6, 5), [S0])], [t(0), t(1), True, True]).expand == "expand_mean"


def test_pointwise_losses():
    d = infer("mse_loss", [((6, 5), [S1]), ((6, 5), None)], [t(0), t(1)])
    assert d.inputs == [(S1,), (S1,)] and d.outputs == ((P,), ()) and d.extra["denominator"] == 30
    d = infer("mse_loss", [((6, 5), [S0]), ((6, 5), [S0]), ((6, 5), [R])], [t(0), t(1)], {"weight": t(2)})
    assert d.inputs == [(S0,), (S0,), (S0,)] and d.extra["denominator"] is None  # the global weight sum
    d = infer("huber_loss", [((6, 5), [S0]), ((6, 5), [S0]), ((6, 5), [S0])], [t(0), t(1), "mean", 1.0, t(2)])
    assert d.extra["denominator"] == 30
    d = infer("binary_cross_entropy_with_logits", [((6, 5), [S0]), ((6, 5), [S0]), ((5,), [R])],
              [t(0), t(1)], {"pos_weight": t(2), "reduction": "none"})
    assert d.inputs == [(S0,), (S0,), (R,)] and d.outputs == ((S0,), (6, 5))
    d = infer("kl_div", [((6, 5), [S0]), ((6, 5), [S0])], [t(0), t(1)], {"reduction": "batchmean"})
    assert d.extra["denominator"] == 6 and d.expand == "expand_mean"
    d = infer("l1_loss", [((6, 5), [P]), ((6, 5), [R])], [t(0), t(1)])
    assert d.inputs == [(R,), (R,)] and d.outputs == ((R,), ()) and d.expand is None
    d = infer("smooth_l1_loss", [((6, 5), [S0, S1]), ((5,), None)], [t(0), t(1)], {"reduction": "sum"}, mesh=(2, 2))
    assert d.inputs == [(S0, S1), (R, S0)] and d.outputs == ((P, P), ())


def test_rejections_name_the_op():
    two = [((6, 5), [S0]), ((6,), [S0])]
    with pytest.raises(RuleError, match=r"torch.nn.functional.cross_entropy: reduction='avg'; expected one of"):
        infer("cross_entropy", two, [t(0), t(1)], {"reduction": "avg"})
    with pytest.raises(RuleError, match="reduction='batchmean' is only valid for kl_div"):
        infer("nll_loss", two, [t(0), t(1)], {"reduction": "batchmean"})
    with pytest.raises(RuleError, match="reduction='batchmean' is only valid for kl_div"):
        infer("mse_loss", [((6, 5), [S0]), ((6, 5), [S0])], [t(0), t(1)], {"reduction": "batchmean"})
    with pytest.raises(RuleError, match="input and target must be tensors"):
        infer("mse_loss", [((6, 5), [S0])], [t(0), 1.0])
    with pytest.raises(ValueError, match="weighted_mean='x'"):
        RULES[F + "mse_loss"].rule_instance().__class__("op", weighted_mean="x")
