# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Strategy synthesis on simulated meshes (``hp_agent.dist_op.synth``) and the rules that execute it as data
(``hyper_parallel.core.ops.rules.table``).

* the strategies found for ``mm``, ``sum(dim)``, ``cat(dim)``, ``transpose``, ``outer`` and ``rot90`` equal
  hand-written expectations (with the conditions and the permutation they generalise to);
* the adversarial value generators reject a planted strategy that holds only for equal inputs;
* the emitted registry options run through ``check_op`` on 2 gloo ranks (forward and backward) for
  ``outer`` (factor rule) and ``rot90`` (strategy table).
"""
import pytest

from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.table import FactorRule, ReplicateRule, StrategyTableRule, parse_strategy
from hyper_parallel.core.placement import Partial, Replicate, Shard
from hyper_parallel.testing import multi_rank

from hp_agent.dist_op.synth import (conditions, emit, equation_strategies, extra_arguments, factor_equation,
                                    permutation, synthesize)


def _r(*shape):
    import torch
    return torch.rand(shape) + 0.5


def _table(op, fn, sample, **kw):
    return synthesize(op, fn, [sample], use_opinfo=False, **kw).table()


def test_matmul_family_and_outer_match_hand_expectations():
    import torch
    mm = _table("torch.mm", torch.mm, ([_r(4, 6), _r(6, 5)], {}))
    assert mm == {"2,2": ["P(sum),R->P(sum)", "R,P(sum)->P(sum)", "R,R->R", "R,S(1)->S(1)", "S(0),R->S(0)",
                          "S(1),S(0)->P(sum)"]}
    synth = synthesize("torch.outer", torch.outer, [([_r(4), _r(5)], {})], use_opinfo=False)
    assert synth.table() == {"1,1": ["P(sum),R->P(sum)", "R,P(sum)->P(sum)", "R,R->R", "R,S(0)->S(1)",
                                     "S(0),R->S(0)"]}
    assert factor_equation(synth) == "i,j->ij" and synth.differentiable is True
    assert sorted(s.text() for s in equation_strategies("i,j->ij")) == synth.table()["1,1"]
    assert emit(synth, {}) == ({"rule": "FactorRule", "module": "hyper_parallel.core.ops.rules.table",
                                "options": {"equation": "i,j->ij"}}, [])


def test_reduction_concat_and_transpose_match_hand_expectations():
    import torch
    synth = synthesize("torch.sum", torch.sum, [([_r(4, 5, 6)], {"dim": 0})], use_opinfo=False)
    assert synth.table()["3;dim=1"] == ["P(sum)->P(sum)", "R->R", "S(0)->S(0)", "S(1)->P(sum)", "S(2)->S(1)"]
    assert sorted(synth.table()) == ["3;dim=0", "3;dim=1", "3;dim=2"]  # the dim sweep
    assert conditions(synth) == ["S(d) -> S(d if d < dim else d - 1) when d != dim", "S(dim) -> P(sum)"]
    cat = _table("torch.cat", lambda ts, dim=0: torch.cat(ts, dim), ([[_r(4, 5), _r(3, 5)]], {"dim": 0}))
    assert cat["2,2;dim=0"] == ["P(max),P(max)->P(max)", "P(max),R->P(max)", "P(min),P(min)->P(min)",
                                "P(min),R->P(min)", "P(sum),P(sum)->P(sum)", "R,P(max)->P(max)",
                                "R,P(min)->P(min)", "R,R->R", "S(1),S(1)->S(1)"]
    tr = _table("torch.transpose", torch.transpose, ([_r(4, 5, 6)], {"dim0": 0, "dim1": 2}))
    assert [s for s in tr["3;dim0=0;dim1=2"] if s.startswith("S")] == ["S(0)->S(2)", "S(1)->S(1)", "S(2)->S(0)"]


def test_rot90_kwarg_sweep_gives_the_permutation_per_k():
    import torch
    synth = synthesize("torch.rot90", torch.rot90, [([_r(4, 5)], {"k": 1, "dims": [0, 1]})], use_opinfo=False)
    perms = permutation(synth)
    assert perms["2;dims=[0, 1];k=0"] == {0: 0, 1: 1}
    assert perms["2;dims=[0, 1];k=1"] == {0: 1}  # the flipped dim cannot stay sharded
    assert perms["2;dims=[0, 1];k=2"] == {}
    assert perms["2;dims=[0, 1];k=3"] == {1: 0}
    entry, questions = emit(synth, {"k": (1, 1), "dims": (2, [0, 1])})
    assert not questions and entry["rule"] == "StrategyTableRule"
    assert entry["options"]["shapes"]["2;dims=[0, 1];k=1"] == [["0.1", "0.0"]]


def test_adversarial_generators_reject_a_strategy_valid_only_for_equal_inputs():
    import torch

    def planted(a, b):  # row-local only while a == b: the global sum term vanishes then
        return a + (b - a).sum()

    x = _r(4, 6)
    sample = ([x, x.clone()], {})
    naive = _table("planted", planted, sample, generators=("sample",), distinct=False)
    assert "S(0),S(0)->S(0)" in naive["2,2"]  # the equal sample alone accepts it
    strict = _table("planted", planted, sample, distinct=False)  # the value generators alone reject it
    assert "S(0),S(0)->S(0)" not in strict["2,2"] and "R,R->R" in strict["2,2"]
    assert "S(0),S(0)->S(0)" not in _table("planted", planted, sample)["2,2"]


def test_non_differentiable_op_is_detected():
    import torch
    synth = synthesize("torch.heaviside", torch.heaviside, [([_r(4, 6) - 1.0, _r(4, 6)], {})], use_opinfo=False)
    assert synth.differentiable is False
    assert "S(0),S(0)->S(0)" in synth.table()["2,2"]


# ---------------------------------------------------------------------- the rules executing the data
def _call(op, shapes, placements, args=(), kwargs=None, mesh=(2,)):
    tensors = [TensorArg(i, tuple(s), tuple(p)) for i, (s, p) in enumerate(zip(shapes, placements))]
    return OpCall(op, tensors, tuple(("__tensor__", i) for i in range(len(shapes))) + tuple(args), kwargs or {}, mesh)


ROT90 = {"layout": {"k": [1, 1], "dims": [2, [0, 1]]},
         "table": {"2;dims=[0, 1];k=1": ["R->R", "S(0)->S(1)", "P(sum)->P(sum)"]},
         "shapes": {"2;dims=[0, 1];k=1": [["0.1", "0.0"]]}}


def test_strategy_table_rule_keeps_gathers_and_refuses():
    rule = StrategyTableRule("torch.rot90", **ROT90)
    keep = rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(0),)]))
    assert keep.inputs == [(Shard(0),)] and keep.outputs == ((Shard(1),), (6, 4))
    gather = rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(1),)]))
    assert gather.inputs == [(Replicate(),)] and gather.outputs[0] == (Replicate(),)
    partial = rule.infer(_call("torch.rot90", [(4, 6)], [(Partial("sum"),)], args=(1, (0, 1))))
    assert partial.outputs[0] == (Partial("sum"),)
    # 2-D mesh: a dim sharded by both mesh dims is gathered on the second
    nested = rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(0), Shard(0))], mesh=(2, 2)))
    assert nested.inputs == [(Shard(0), Replicate())]
    with pytest.raises(RuleError, match="no synthesised strategy for signature '2;dims=\\[0, 1\\];k=2'"):
        rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(0),)], kwargs={"k": 2}))
    with pytest.raises(RuleError, match="no output shape"):
        StrategyTableRule("x", layout={}, table={"1": ["R->R"]}, shapes={})
    with pytest.raises(RuleError, match="is not R, S"):
        parse_strategy("S(x)->R")


def test_signature_without_a_reachable_row_falls_back_to_replicate():
    """``linalg.pinv``'s 3-D signature holds only ``S(0)->S(0)``: a replicated input reaches no row by
    gathering, so the call is refused without a fallback and runs replicated with one."""
    table = {"layout": {}, "table": {"3": ["S(0)->S(0)"]}, "shapes": {"3": [["0.0", "0.2", "0.1"]]}}
    strict = StrategyTableRule("torch.linalg.pinv", **table)
    with pytest.raises(RuleError, match="no strategy reachable by gathering from inputs \\['R'\\]"):
        strict.infer(_call("torch.linalg.pinv", [(4, 3, 2)], [(Replicate(),)]))
    rule = StrategyTableRule("torch.linalg.pinv", **table, fallback="replicate")
    keep = rule.infer(_call("torch.linalg.pinv", [(4, 3, 2)], [(Shard(0),)]))
    assert keep.inputs == [(Shard(0),)] and keep.outputs == ((Shard(0),), (4, 2, 3))
    whole = rule.infer(_call("torch.linalg.pinv", [(4, 3, 2)], [(Replicate(),)]))
    assert whole.inputs == [(Replicate(),)] and whole.outputs is None and whole.expand == "expand_replicated"


def test_unknown_signature_falls_back_to_replicate_and_replicate_rule_gathers():
    rule = StrategyTableRule("torch.rot90", **ROT90, fallback="replicate")
    keep = rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(0),)]))
    assert keep.inputs == [(Shard(0),)] and keep.outputs == ((Shard(1),), (6, 4))  # the table still decides
    other = rule.infer(_call("torch.rot90", [(4, 6)], [(Shard(0),)], kwargs={"k": 2}))  # not in the table
    assert other.inputs == [(Replicate(),)] and other.outputs is None and other.expand == "expand_replicated"
    with pytest.raises(RuleError, match="fallback"):
        StrategyTableRule("x", **ROT90, fallback="guess")
    rep = ReplicateRule("torch.linalg.det")
    d = rep.infer(_call("torch.linalg.det", [(2, 3, 3), (3,)], [(Shard(0), Partial("sum")), (Replicate(),) * 2],
                        mesh=(2, 2)))
    assert d.inputs == [(Replicate(),) * 2] * 2 and d.outputs is None and d.expand == "expand_replicated"
    inplace = ReplicateRule("Tensor.zero_")
    assert inplace.infer(_call("Tensor.zero_", [(4,)], [(Replicate(),)])).inputs == [(Replicate(),)]
    with pytest.raises(RuleError, match="in-place op on a sharded"):
        inplace.infer(_call("Tensor.zero_", [(4,)], [(Shard(0),)]))


def test_emit_falls_back_to_replicate_only_where_no_table_fits():
    import torch
    # arguments a signature cannot key (interpolate's size/mode): all-R probed only, ReplicateRule
    sample = ([_r(1, 2, 6)], {"size": 9, "mode": "linear"})
    assert extra_arguments([sample]) == ["mode", "size"]
    synth = synthesize("torch.nn.functional.interpolate", torch.nn.functional.interpolate, [sample],
                       use_opinfo=False, replicate_only=True)
    synth.extra_args = extra_arguments([sample])
    assert synth.table() == {"3": ["R->R"]}
    assert emit(synth, {}) == ({"rule": "ReplicateRule", "module": "hyper_parallel.core.ops.rules.table"}, [])
    # a nondeterministic op accepts nothing, not even R -> R: no entry, a question
    noisy = synthesize("noisy", lambda t: t + torch.rand(t.shape), [([_r(4, 6)], {})], use_opinfo=False,
                       replicate_only=True)
    entry, questions = emit(noisy, {})
    assert entry is None and any("R -> R is not accepted" in q for q in questions)
    # a table that explains every signature keeps its sharded strategies and replicates other signatures
    flip = synthesize("torch.flip", torch.flip, [([_r(4, 6)], {"dims": [0]})], use_opinfo=False)
    entry, _ = emit(flip, {"dims": (1, None)})
    assert entry["rule"] == "StrategyTableRule" and entry["options"]["fallback"] == "replicate"
    assert "S(1)->S(1)" in entry["options"]["table"]["2;dims=[0]"]


def test_factor_rule_checks_the_equation_and_the_ranks():
    rule = FactorRule("torch.outer", equation="i,j->ij")
    d = rule.infer(_call("torch.outer", [(4,), (5,)], [(Replicate(),), (Shard(0),)]))
    assert d.inputs == [(Replicate(),), (Shard(0),)] and d.outputs == ((Shard(1),), (4, 5))
    with pytest.raises(RuleError, match="ranks"):
        rule.infer(_call("torch.outer", [(4, 2), (5,)], [(Replicate(),), (Replicate(),)]))
    with pytest.raises(RuleError, match="expected letters"):
        FactorRule("x", equation="i,j=>ij")
    with pytest.raises(RuleError, match="repeated letter"):
        FactorRule("x", equation="ii->i")


@multi_rank(world_size=2, timeout=600)
def _parity(name, rule, options):
    import torch
    from hyper_parallel.core.ops.registry import get_registry, register_op
    from hyper_parallel.platform.torch.dispatch import clear_cache, install_registry
    from hyper_parallel.testing.op_parity import check_op
    install_registry()
    old = get_registry().entries.get(name)
    try:
        register_op(name, rule, module="hyper_parallel.core.ops.rules.table", options=options, replace=True)
        clear_cache()
        torch.manual_seed(0)
        if name == "torch.outer":
            report = check_op(name, torch.outer, [_r(4), _r(5)])
            want = 4  # R,R / S(0),R / R,S(0) / P,R / R,P: every combination but P,P runs without communication
        elif name == "torch.linalg.det":
            report = check_op(name, torch.linalg.det, [_r(4, 3, 3)])
            want = 1  # R only: every other placement is gathered first
        else:
            report = check_op(name, lambda t: torch.rot90(t, 1, [0, 1]), [_r(4, 5)])
            want = 3  # R, S(0), P(sum)
        report.raise_if_failed()
        assert not report.rejected and report.native >= want, (report.native, report.rejected[:2])
    finally:
        if old is None:
            get_registry().entries.pop(name, None)
        else:
            register_op(name, old.rule, module=old.module, options=old.options, replace=True)
        clear_cache()


@pytest.mark.parametrize("name, rule, options", [
    ("torch.outer", "FactorRule", {"equation": "i,j->ij"}),
    ("torch.linalg.det", "ReplicateRule", {}),
    ("torch.rot90", "StrategyTableRule", ROT90),
])
def test_emitted_rules_match_single_device_on_two_ranks(name, rule, options):
    _parity(name=name, rule=rule, options=options)
