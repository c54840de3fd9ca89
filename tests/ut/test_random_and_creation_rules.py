# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the random-op and creation-op rules (pure: specs in, decisions out) and their registry files."""
import itertools

import pytest

from hyper_parallel.core.placement import Partial, Replicate, Shard
from hyper_parallel.core.ops.registry import BUILTIN_YAML_DIR, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules import creation, random_ops

T0 = ("__tensor__", 0)
T1 = ("__tensor__", 1)
SINGLE = [Replicate(), Shard(0), Shard(1), Partial(), Partial("avg"), Partial("max")]


def _call(op, placements, args=(), kwargs=None, shape=(4, 6), more=()):
    tensors = [TensorArg(0, shape, None if placements is None else tuple(placements))] + list(more)
    mesh = (2,) * (len(placements) if placements else 1)
    return OpCall(op, tensors, (T0,) + tuple(args), dict(kwargs or {}), mesh)


def _combos(ndim):
    return list(itertools.product(SINGLE, repeat=ndim))


@pytest.mark.parametrize("mesh_ndim", [1, 2])
def test_like_rules_replace_partial_by_replicate(mesh_ndim):
    rules = [random_ops.RandomLikeRule("torch.rand_like", distribution="uniform"),
             random_ops.RandomLikeRule("torch.randn_like", distribution="normal"),
             random_ops.BernoulliRule("torch.bernoulli", distribution="bernoulli"),
             creation.LikeRule("torch.zeros_like")]
    for placements in _combos(mesh_ndim):
        want = tuple(Replicate() if isinstance(p, Partial) else p for p in placements)
        for rule in rules:
            args = (0.5,) if isinstance(rule, random_ops.BernoulliRule) else ()
            d = rule.infer(_call(rule.op, placements, args))
            assert d.inputs == [None] and d.outputs == (want, (4, 6)), (rule.op, placements)
        probs = random_ops.BernoulliRule("torch.bernoulli").infer(_call("torch.bernoulli", placements))
        assert probs.inputs == [want] and probs.outputs == (want, (4, 6))  # probabilities are values: reduce P


@pytest.mark.parametrize("mesh_ndim", [1, 2])
def test_inplace_and_dropout_rules_keep_every_placement(mesh_ndim):
    uniform = random_ops.RandomInplaceRule("Tensor.uniform_", distribution="uniform", params=["from", "to"],
                                           defaults=[0.0, 1.0])
    dropout = random_ops.DropoutRule("torch.nn.functional.dropout", signature="functional")
    for placements in _combos(mesh_ndim):
        for rule, args in ((uniform, (-1.0, 1.0)), (dropout, (0.3,))):
            d = rule.infer(_call(rule.op, placements, args))
            assert d.inputs == [None] and d.outputs == (tuple(placements), (4, 6)) and d.expand, (rule.op, placements)


def test_bernoulli_inplace_tensor_p_is_laid_out_like_self():
    rule = random_ops.RandomInplaceRule("Tensor.bernoulli_", distribution="bernoulli", params=["p"], defaults=[0.5])
    p_full = TensorArg(1, (4, 6), (Shard(1),))
    d = rule.infer(_call(rule.op, [Partial()], (T1,), more=[p_full]))
    assert d.inputs == [None, (Replicate(),)] and d.outputs == ((Partial(),), (4, 6))
    d = rule.infer(_call(rule.op, [Shard(0)], (), {"p": T1}, more=[TensorArg(1, (1, 1), None)]))
    assert d.inputs == [None, (Replicate(),)]
    with pytest.raises(RuleError, match=r"Tensor.bernoulli_: tensor p of shape \[6\] must have self's shape"):
        rule.infer(_call(rule.op, [Shard(0)], (T1,), more=[TensorArg(1, (6,), None)]))
    with pytest.raises(RuleError, match=r"p='x': expected a number"):
        rule.infer(_call(rule.op, [Shard(0)], ("x",)))


def test_random_rules_refuse_clearly():
    like = random_ops.RandomLikeRule("torch.rand_like")
    with pytest.raises(RuleError, match="torch.rand_like: the input tensor must be a DTensor"):
        like.infer(_call("torch.rand_like", None))
    with pytest.raises(RuleError, match="generator= is not supported on DTensors"):
        like.infer(_call("torch.rand_like", [Shard(0)], kwargs={"generator": object()}))
    with pytest.raises(RuleError, match="out= is not supported"):
        random_ops.BernoulliRule("torch.bernoulli").infer(_call("torch.bernoulli", [Shard(0)], kwargs={"out": T1}))
    randint = random_ops.RandomLikeRule("torch.randint_like", distribution="randint")
    assert randint.infer(_call("torch.randint_like", [Shard(0)], (10,))).expand == "generate"
    assert randint.infer(_call("torch.randint_like", [Shard(0)], (-2, 3))).outputs == ((Shard(0),), (4, 6))
    with pytest.raises(RuleError, match=r"randint bounds low=3, high=3"):
        randint.infer(_call("torch.randint_like", [Shard(0)], (3, 3)))
    for p in (-0.1, 1.5, True, "x"):
        with pytest.raises(RuleError, match="dropout probability has to be between 0 and 1"):
            random_ops.DropoutRule("torch.dropout", signature="aten").infer(_call("torch.dropout", [Shard(0)], (p,)))
    with pytest.raises(RuleError, match=r"p=1\.5: expected a probability in \[0, 1\]"):
        random_ops.BernoulliRule("torch.bernoulli").infer(_call("torch.bernoulli", [Shard(0)], (1.5,)))
    with pytest.raises(ValueError, match="distribution='gamma'"):
        random_ops.RandomLikeRule("torch.rand_like", distribution="gamma")
    with pytest.raises(ValueError, match="signature='x'"):
        random_ops.DropoutRule("torch.dropout", signature="x")
    with pytest.raises(ValueError, match="differ in length"):
        random_ops.RandomInplaceRule("Tensor.uniform_", params=["from"], defaults=[])


def test_dropout_flags_per_signature():
    def flags(signature, args, kwargs=None):
        rule = random_ops.DropoutRule("op", signature=signature)
        call = _call("op", [Shard(0)], args, kwargs)
        return rule._flags(call.arg)  # pylint: disable=protected-access

    assert flags("functional", ()) == (0.5, True, False)
    assert flags("functional", (0.2, False, True)) == (0.2, False, True)
    assert flags("functional", (), {"p": 0.1, "training": False, "inplace": True}) == (0.1, False, True)
    assert flags("aten", (0.3, False)) == (0.3, False, False)
    assert flags("aten_inplace", (0.3, True)) == (0.3, True, True)


@pytest.mark.parametrize("mesh_ndim", [1, 2])
def test_new_rules_give_replicate_with_the_given_size(mesh_ndim):
    rep = (Replicate(),) * mesh_ndim
    zeros = creation.NewRule("Tensor.new_zeros")
    full = creation.NewRule("Tensor.new_full", extra=1)
    strided = creation.NewRule("Tensor.new_empty_strided", extra=1)
    for placements in _combos(mesh_ndim):
        assert zeros.infer(_call("Tensor.new_zeros", placements, ([3, 5],))).outputs == (rep, (3, 5))
        assert zeros.infer(_call("Tensor.new_zeros", placements, (3, 5))).outputs == (rep, (3, 5))
        assert zeros.infer(_call("Tensor.new_zeros", placements, (7,))).outputs == (rep, (7,))
        assert zeros.infer(_call("Tensor.new_zeros", placements, ([],))).outputs == (rep, ())
        assert zeros.infer(_call("Tensor.new_zeros", placements, (), {"size": [2]})).outputs == (rep, (2,))
        assert full.infer(_call("Tensor.new_full", placements, ([2, 2], 1.5))).outputs == (rep, (2, 2))
        assert strided.infer(_call("Tensor.new_empty_strided", placements, ([2, 3], [3, 1]))).outputs == (rep, (2, 3))
        new_tensor = creation.NewTensorRule("Tensor.new_tensor")
        assert new_tensor.infer(_call("Tensor.new_tensor", placements, ([[1, 2], [3, 4], [5, 6]],))).outputs == \
            (rep, (3, 2))
        assert new_tensor.infer(_call("Tensor.new_tensor", placements, (2.5,))).outputs == (rep, ())


def test_creation_rules_refuse_clearly():
    zeros = creation.NewRule("Tensor.new_zeros")
    with pytest.raises(RuleError, match="Tensor.new_zeros: self must be a DTensor"):
        zeros.infer(_call("Tensor.new_zeros", None, ([2],)))
    with pytest.raises(RuleError, match="missing the size argument"):
        zeros.infer(_call("Tensor.new_zeros", [Shard(0)]))
    with pytest.raises(RuleError, match=r"size \['a'\]: expected a sequence of ints"):
        zeros.infer(_call("Tensor.new_zeros", [Shard(0)], (["a"],)))
    with pytest.raises(RuleError, match=r"size \[2, -3\]: negative dimension"):
        zeros.infer(_call("Tensor.new_zeros", [Shard(0)], ([2, -3],)))
    new_tensor = creation.NewTensorRule("Tensor.new_tensor")
    with pytest.raises(RuleError, match="data is ragged"):
        new_tensor.infer(_call("Tensor.new_tensor", [Shard(0)], ([[1], [2, 3]],)))
    with pytest.raises(RuleError, match="data is a tensor"):
        new_tensor.infer(_call("Tensor.new_tensor", [Shard(0)], (T1,), more=[TensorArg(1, (2,), None)]))
    with pytest.raises(RuleError, match="data of type str"):
        new_tensor.infer(_call("Tensor.new_tensor", [Shard(0)], ("ab",)))
    with pytest.raises(RuleError, match="out= is not supported for creation ops"):
        creation.LikeRule("torch.zeros_like").infer(_call("torch.zeros_like", [Shard(0)], (), {"out": T1}))


def test_registry_files_resolve():
    for name in ("random.yaml", "creation.yaml"):
        entries = load_yaml_file(BUILTIN_YAML_DIR / name)
        assert len(entries) >= 10
        for entry in entries:
            assert entry.rule_instance().op == entry.name


def test_feature_dropout_mask_dims_and_refusals():
    def rule(feature):
        return random_ops.DropoutRule(f"dropout{feature}d", signature="functional", feature=feature)

    assert [rule(1).mask_dims(n) for n in (2, 3)] == [1, 2]  # (C, L) unbatched, (N, C, L)
    assert [rule(2).mask_dims(n) for n in (2, 3, 4)] == [2, 2, 2]  # torch reads 3-D as (N, C, L)
    assert [rule(3).mask_dims(n) for n in (4, 5)] == [1, 2]
    assert random_ops.DropoutRule("dropout").mask_dims(4) == 4  # element-wise
    d = rule(2).infer(_call("dropout2d", [Shard(3), Partial()], (0.2,), shape=(2, 3, 4, 5)))
    assert d.outputs == ((Shard(3), Partial()), (2, 3, 4, 5)) and d.expand == "dropout"
    with pytest.raises(RuleError, match="dropout1d: expected a 2-D or 3-D input, got 4-D"):
        rule(1).infer(_call("dropout1d", [Shard(0)], (0.2,), shape=(2, 3, 4, 5)))
    with pytest.raises(RuleError, match="feature dropout needs at least 2 dims"):
        rule(2).infer(_call("dropout2d", [Shard(0)], (0.2,), shape=(4,)))
    with pytest.raises(ValueError, match="option feature=4"):
        rule(4)


def test_normal_rule_lays_out_like_an_elementwise_op():
    rule = random_ops.NormalRule("torch.normal")
    d = rule.infer(_call("torch.normal", [Shard(0)], (T1,), more=[TensorArg(1, (6,), (Replicate(),))]))
    assert d.outputs == ((Shard(0),), (4, 6)) and d.expand == "sample"
    assert d.inputs == [(Shard(0),), (Replicate(),)]
    d = rule.infer(_call("torch.normal", [Partial()], (2.0,)))
    assert d.inputs == [(Replicate(),)] and d.outputs == ((Replicate(),), (4, 6))  # mean values: reduce first
    with pytest.raises(RuleError, match="generator= is not supported"):
        rule.infer(_call("torch.normal", [Shard(0)], (1.0,), {"generator": object()}))


def test_alpha_dropout_reduces_partial_only_when_it_draws():
    rule = random_ops.DropoutRule("torch.nn.functional.alpha_dropout", signature="functional", alpha=True)
    d = rule.infer(_call(rule.op, [Partial(), Shard(0)], (0.2, True)))
    assert d.inputs == [(Replicate(), Shard(0))] and d.outputs == ((Replicate(), Shard(0)), (4, 6))
    for args in ((0.2,), (0.2, False), (0.0, True)):  # training defaults to False; p = 0 draws nothing
        d = rule.infer(_call(rule.op, [Partial(), Shard(0)], args))
        assert d.inputs == [None] and d.outputs == ((Partial(), Shard(0)), (4, 6)), args


def test_inplace_nonlinear_random_ops_refuse_partial_self():
    alpha = random_ops.DropoutRule("torch.alpha_dropout_", signature="aten_inplace", alpha=True)
    with pytest.raises(RuleError, match="in-place alpha dropout of a Partial tensor is not linear"):
        alpha.infer(_call(alpha.op, [Partial()], (0.2, True)))
    assert alpha.infer(_call(alpha.op, [Shard(0)], (0.2, True))).outputs == ((Shard(0),), (4, 6))
    rrelu = random_ops.RReluRule("torch.rrelu_", inplace=True)
    with pytest.raises(RuleError, match="in-place rrelu of a Partial tensor is not linear"):
        rrelu.infer(_call(rrelu.op, [Partial()], (0.1, 0.3, True)))
    d = random_ops.RReluRule("torch.rrelu").infer(_call("torch.rrelu", [Partial(), Shard(1)], (0.1, 0.3, True)))
    assert d.inputs == [(Replicate(), Shard(1))] and d.outputs == ((Replicate(), Shard(1)), (4, 6))
    with pytest.raises(RuleError, match=r"lower=0.5, upper=0.1: expected numbers with 0 <= lower <= upper"):
        random_ops.RReluRule("torch.rrelu").infer(_call("torch.rrelu", [Shard(0)], (0.5, 0.1)))


@pytest.mark.parametrize("mesh_ndim", [1, 2])
def test_multinomial_keeps_row_shards_and_replicates_categories(mesh_ndim):
    rule = random_ops.MultinomialRule("torch.multinomial")
    for placements in _combos(mesh_ndim):
        want = tuple(p if p == Shard(0) else Replicate() for p in placements)
        d = rule.infer(_call(rule.op, placements, (3,)))
        assert d.inputs == [want] and d.outputs == (want, (4, 3)) and d.expand == "sample", placements
    d = rule.infer(_call(rule.op, [Shard(0)], (9, True), shape=(6,)))
    assert d.inputs == [(Replicate(),)] and d.outputs == ((Replicate(),), (9,))
    with pytest.raises(RuleError, match="cannot sample 7 > 6 categories without replacement"):
        rule.infer(_call(rule.op, [Shard(0)], (7,)))
    with pytest.raises(RuleError, match="num_samples=0: expected a positive int"):
        rule.infer(_call(rule.op, [Shard(0)], (0,)))
    with pytest.raises(RuleError, match="expected a 1-D or 2-D probability tensor, got 3-D"):
        rule.infer(_call(rule.op, [Shard(0)], (1,), shape=(2, 3, 4)))


def test_inplace_random_parameters_are_checked():
    cases = [("uniform", ["from", "to"], (2.0, 1.0), "expected from <= to"),
             ("normal", ["mean", "std"], (0.0, -1.0), "expected std >= 0"),
             ("log_normal", ["mean", "std"], (0.0, 0.0), "expected std > 0"),
             ("exponential", ["lambd"], (0.0,), "expected lambd > 0"),
             ("geometric", ["p"], (1.5,), r"expected p in \(0, 1\]"),
             ("cauchy", ["median", "sigma"], (0.0, -2.0), "expected sigma > 0"),
             ("bernoulli", ["p"], (-0.1,), r"expected p in \[0, 1\]")]
    for dist, names, values, message in cases:
        rule = random_ops.RandomInplaceRule(f"Tensor.{dist}_", distribution=dist, params=names,
                                            defaults=[0.0] * len(names))
        with pytest.raises(RuleError, match=message):
            rule.infer(_call(rule.op, [Shard(0)], values))
        ok = tuple(abs(v) + 0.5 if i == len(values) - 1 else v for i, v in enumerate(values))
        if dist in ("geometric", "bernoulli"):
            ok = (0.5,)
        if dist == "uniform":
            ok = (1.0, 2.0)
        assert rule.infer(_call(rule.op, [Shard(0)], ok)).expand == "fill"
