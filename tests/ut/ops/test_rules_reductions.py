# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: reduction and scan rules (pure, no processes): accepted and rejected placement combinations."""
from pathlib import Path

import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, S0, S1, S2, P = Replicate(), Shard(0), Shard(1), Shard(2), Partial()
T = ("__tensor__", 0)
RULES = {e.name: e for e in load_yaml_file(Path(BUILTIN_YAML_DIR) / "reductions.yaml")}


def infer(op, shape, placements, *args, mesh=(2,), others=(), **kwargs):
    """Run the registered rule of ``op`` on one DTensor (plus ``others``: (shape, placements) tensors)."""
    tensors = [TensorArg(0, tuple(shape), tuple(placements))]
    tensors += [TensorArg(i + 1, tuple(s), None if p is None else tuple(p)) for i, (s, p) in enumerate(others)]
    call = OpCall(op, tensors, (T,) + args, kwargs, tuple(mesh))
    return RULES[op].rule_instance().infer(call)


def test_sum_over_sharded_dim_is_partial_and_other_shards_shift():
    d = infer("torch.sum", (4, 6), [S0], 0)
    assert d.inputs == [(S0,)] and d.outputs == ((P,), (6,)) and d.expand is None
    d = infer("torch.sum", (4, 6, 2), [S2], 1)
    assert d.outputs == ((S1,), (4, 2))
    d = infer("Tensor.sum", (4, 6, 2), [S2], 1, True)
    assert d.outputs == ((S2,), (4, 1, 2))
    d = infer("torch.sum", (4, 6), [S1])
    assert d.outputs == ((P,), ())
    d = infer("torch.sum", (4, 6), [S1], dim=())  # an empty dim tuple reduces everything, like torch 2.13
    assert d.outputs == ((P,), ())


def test_sum_keeps_partial_and_2d_mesh():
    assert infer("torch.sum", (4, 6), [P], 1).outputs == ((P,), (4,))
    assert infer("torch.sum", (4, 6), [Partial("avg")]).outputs == ((Partial("avg"),), ())
    d = infer("torch.sum", (4, 6), [S0, S1], 0, mesh=(2, 2))
    assert d.inputs == [(S0, S1)] and d.outputs == ((P, S0), (6,))
    d = infer("torch.nansum", (4, 6), [P, S0], (0, 1), True, mesh=(2, 2))
    assert d.outputs == ((P, P), (1, 1))


def test_mean_uses_the_global_count_expand_only_when_needed():
    d = infer("torch.mean", (5, 3), [S0], 0)
    assert d.outputs == ((P,), (3,)) and d.expand == "expand_mean" and d.extra["dims"] == (0,)
    d = infer("Tensor.mean", (5, 3), [S0], 1)
    assert d.outputs == ((S0,), (5,)) and d.expand is None
    assert infer("torch.mean", (5, 3), [P]).expand is None  # mean is linear in a Partial(sum) input


def test_extreme_reductions():
    d = infer("torch.amax", (5, 3), [S0], 0)
    assert d.outputs == ((Partial("max"),), (3,)) and d.expand == "expand_extreme"
    d = infer("Tensor.amin", (5, 3), [S1])
    assert d.outputs == ((Partial("min"),), ())
    assert infer("torch.amax", (5, 3), [Partial("max")], 1).outputs == ((Partial("max"),), (5,))
    d = infer("torch.amax", (5, 3), [P], 1)  # max of a sum is not the sum of maxes
    assert d.inputs == [(R,)] and d.outputs == ((R,), (5,))
    assert infer("torch.amin", (5, 3), [Partial("max")]).inputs == [(R,)]
    assert infer("torch.max", (5, 3), [S1]).outputs == ((Partial("max"),), ())


def test_max_with_dim_picks_across_shards():
    d = infer("torch.max", (5, 3), [S0], 0)
    assert d.expand == "expand_pick" and d.inputs == [(S0,)]
    assert d.outputs == [((R,), (3,)), ((R,), (3,))]
    d = infer("Tensor.min", (5, 3), [S0, S1], 1, True, mesh=(2, 2))
    assert d.outputs == [((S0, R), (5, 1))] * 2 and d.extra["mesh_dims"] == (1,)
    d = infer("torch.max", (5, 3), [S1], 0)
    assert d.outputs == [((S0,), (3,))] * 2 and d.expand is None
    d = infer("torch.max", (5, 3), [P], dim=0)
    assert d.inputs == [(R,)]


def test_max_with_a_second_tensor_is_elementwise():
    d = infer("torch.max", (5, 3), [S0], ("__tensor__", 1), others=[((3,), None)])
    assert d.inputs == [(S0,), (R,)] and d.outputs == ((S0,), (5, 3))


def test_arg_reductions():
    d = infer("torch.argmax", (5, 3), [S0], 0)
    assert d.expand == "expand_pick" and d.outputs == ((R,), (3,))
    d = infer("Tensor.argmin", (5, 3), [S0])  # flattened index: gather first
    assert d.inputs == [(R,)] and d.outputs == ((R,), ()) and d.expand is None
    assert infer("torch.argmax", (5, 3), [S0], keepdim=True).outputs == ((R,), (1, 1))
    assert infer("torch.argmax", (5, 3), [S1], 0).outputs == ((S0,), (3,))


def test_logic_count_and_replicated_reductions():
    d = infer("torch.all", (5, 3), [S0], 0)
    assert d.expand == "expand_logic" and d.outputs == ((R,), (3,)) and d.inputs == [(S0,)]
    assert infer("Tensor.any", (5, 3), [P]).inputs == [(R,)]
    assert infer("torch.count_nonzero", (5, 3), [S0], 0).outputs == ((P,), (3,))
    assert infer("torch.count_nonzero", (5, 3), [S0], (0, 1)).outputs == ((P,), ())
    for op in ("torch.nanmean", "Tensor.nanmean"):
        d = infer(op, (5, 3), [S0], 0)
        assert d.inputs == [(R,)] and d.outputs == ((R,), (3,)) and d.expand is None, op
        assert infer(op, (5, 3), [S1], 0).outputs == ((S0,), (3,)), op
        assert infer(op, (5, 3), [P], 0).inputs == [(R,)], op


def test_var_std_norm_argument_forms():
    d = infer("torch.var", (5, 3), [S1], False)  # var(x, unbiased)
    assert d.outputs == ((R,), ()) and d.expand == "expand_moments" and d.extra["correction"] == 0
    assert infer("torch.var", (5, 3), [S1], 0, True, True).outputs == ((S1,), (1, 3))
    assert infer("Tensor.var", (5, 3), [S1], dim=0, correction=0).outputs == ((S0,), (3,))
    assert infer("torch.norm", (5, 3), [S1], 2, 0).outputs == ((S0,), (3,))
    assert infer("torch.linalg.vector_norm", (5, 3), [S0], 2, 1, True).outputs == ((S0,), (5, 1))


def test_moments_merge_local_statistics():
    d = infer("Tensor.std", (5, 3), [S0, S1], 0, mesh=(2, 2))
    assert d.inputs == [(S0, S1)] and d.outputs == ((R, S0), (3,)) and d.extra["mesh_dims"] == (0,)
    assert d.extra["correction"] == 1
    assert infer("torch.var", (5, 3), [S0], 0, correction=2).extra["correction"] == 2
    assert infer("torch.var", (5, 3), [S0], 0, False, True).extra["correction"] == 0
    assert infer("torch.var", (5, 3), [P], 0).inputs == [(R,)]
    from hyper_parallel.core.ops.rules.reductions import MomentsRule
    with pytest.raises(ValueError, match="moment='skew'"):
        MomentsRule("x", moment="skew")


def test_combinable_reductions_gather_local_results():
    for op, args in [("torch.prod", (0,)), ("Tensor.logsumexp", ((0, 1),)), ("torch.norm", (1, 0)),
                     ("Tensor.norm", ("fro",)), ("torch.linalg.vector_norm", (float("inf"), 0))]:
        d = infer(op, (5, 3), [S0], *args)
        assert d.inputs == [(S0,)] and d.outputs[0] == (R,) and d.expand == "expand_combine", op
        assert infer(op, (5, 3), [P], *args).inputs == [(R,)], op
    assert infer("torch.norm", (5, 3), [S0], 3, 0).extra["ord"] == 3
    assert infer("torch.linalg.vector_norm", (5, 3), [S0]).extra["ord"] == 2
    for p in (0.5, 0, float("-inf"), "nuc"):  # not combinable from shard norms: gathered first
        d = infer("Tensor.norm", (5, 3), [S0], p)
        assert d.inputs == [(R,)] and d.expand is None, p
    assert infer("torch.norm", (5, 3, 2), [S0], "fro", (0, 1, 2)).inputs == [(R,)]
    assert infer("torch.prod", (5, 3), [S1], 0).outputs == ((S0,), (3,))
    from hyper_parallel.core.ops.rules.reductions import ReductionRule
    with pytest.raises(ValueError, match="kind 'combine' needs one of"):
        ReductionRule("x", kind="combine")
    with pytest.raises(ValueError, match="combine='prod'"):
        ReductionRule("x", kind="sum", combine="prod")


def test_cumsum_scan():
    d = infer("torch.cumsum", (5, 3), [S0], 0)
    assert d.inputs == [(S0,)] and d.outputs == ((S0,), (5, 3)) and d.expand == "expand_scan"
    d = infer("Tensor.cumsum", (5, 3), [S0], -1)
    assert d.outputs == ((S0,), (5, 3)) and d.expand is None
    assert infer("torch.cumsum", (5, 3), [P], dim=0).outputs == ((P,), (5, 3))
    d = infer("torch.cumsum", (5, 3), [S0, S0], 0, mesh=(2, 2))  # nested sharding: the inner one gathers
    assert d.inputs == [(S0, R)] and d.extra["mesh_dims"] == (0,)
    assert infer("torch.cumsum", (5, 3), [Partial("max")], 1).inputs == [(R,)]


def test_rejected_arguments_name_the_op():
    with pytest.raises(RuleError, match=r"torch.sum: dim=2 is out of range for a 2-D tensor"):
        infer("torch.sum", (5, 3), [S0], 2)
    with pytest.raises(RuleError, match=r"torch.sum: dim \(0, -2\) names a dimension twice"):
        infer("torch.sum", (5, 3), [S0], (0, -2))
    with pytest.raises(RuleError, match=r"torch.mean: dim must be an int or a tuple of ints"):
        infer("torch.mean", (5, 3), [S0], "a")
    with pytest.raises(RuleError, match=r"torch.max: dim must be an int, got \[0\]"):
        infer("torch.max", (5, 3), [S0], [0])
    with pytest.raises(RuleError, match=r"torch.cumsum: dim must be an int, got None"):
        infer("torch.cumsum", (5, 3), [S0])
    with pytest.raises(RuleError, match="torch.sum: expected one tensor argument, got 2"):
        infer("torch.sum", (5, 3), [S0], others=[((3,), None)])
    with pytest.raises(RuleError, match="torch.argmax: dim must be an int"):
        infer("torch.argmax", (5, 3), [S0], (0, 1))


def test_bad_options_are_refused():
    from hyper_parallel.core.ops.rules.reductions import ReductionRule
    with pytest.raises(ValueError, match="kind='avg'"):
        ReductionRule("x", kind="avg")
    with pytest.raises(ValueError, match="reduce='sum'"):
        ReductionRule("x", reduce="sum")
    with pytest.raises(RuleError, match="unknown option"):
        ReductionRule("x", colour="red")


def test_zero_dim_input():
    assert infer("torch.sum", (), [P]).outputs == ((P,), ())
    assert infer("torch.amax", (), [R], 0).outputs == ((R,), ())


def test_non_sum_scans_and_two_output_reductions():
    # cumprod/logcumsumexp: CombineScanRule keeps the scanned shard and folds in the earlier shards' carry
    d = infer("torch.cumprod", (5, 3), [S0], 0)
    assert d.inputs == [(S0,)] and d.outputs == ((S0,), (5, 3)) and d.expand == "expand_scan"
    assert infer("Tensor.logcumsumexp", (5, 3), [S0], 1).outputs == ((S0,), (5, 3))
    assert infer("torch.cumprod", (5, 3), [P], 1).inputs == [(R,)]
    d = infer("torch.cummax", (5, 3), [S1], 0)
    assert d.outputs == [((S1,), (5, 3))] * 2
    d = infer("torch.var_mean", (5, 3), [S0], 1, True, True)
    assert d.outputs == [((S0,), (5, 1))] * 2 and d.expand is None
    d = infer("torch.std_mean", (5, 3), [S0])
    assert d.inputs == [(S0,)] and d.outputs == [((R,), ())] * 2 and d.expand == "expand_moments"
    assert infer("torch.nanmean", (5, 3), [S0], 0).inputs == [(R,)]
    from hyper_parallel.core.ops.rules.reductions import ReductionRule, ScanRule
    with pytest.raises(ValueError, match="2 outputs need kind 'replicate'"):
        ReductionRule("x", kind="sum", outputs=2)
    with pytest.raises(ValueError, match="kind='max'"):
        ScanRule("x", kind="max")
