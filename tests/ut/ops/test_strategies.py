# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Strategy rows of a registry entry (``strategies:``, hyper_parallel.core.ops.strategies): parsing, the
per-mesh-dim composition with the rule's own decision, the per-position rows of ForeachRule, the registry
field."""
import pytest

from hyper_parallel.core.ops.registry import RegistryError, load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.rules.foreach import ForeachRule
from hyper_parallel.core.ops.rules.matmul import AddmmRule
from hyper_parallel.core.ops.strategies import attach_strategies, parse_row, parse_strategies
from hyper_parallel.core.placement import Partial, Replicate, Shard

P, R = Partial("sum"), Replicate()


def _call(op, shapes, placements, mesh=(2,), args=None):
    tensors = [TensorArg(i, s, p) for i, (s, p) in enumerate(zip(shapes, placements))]
    args = args if args is not None else tuple(("__tensor__", i) for i in range(len(shapes)))
    return OpCall(op, tensors, args, {}, mesh)


def test_rows_parse_and_reject_malformed_text():
    assert parse_row("P(sum),R->P(sum)", "x") == (("P(sum)", "R"), ("P(sum)",))
    assert parse_strategies("op", {"2,1": ["S(0),R->S(0)"], "*": ["P(sum)->P(sum)"]}) == {
        "2,1": [(("S(0)", "R"), ("S(0)",))], None: [(("P(sum)",), ("P(sum)",))]}
    for bad, text in [("P(sum),R", "inputs->outputs"), ("Q,R->R", "placement .Q. is not R"), ("R,R->R", "adds nothing")]:
        with pytest.raises(RuleError, match=text):
            parse_row(bad, "torch.x: strategies")
    with pytest.raises(RuleError, match="input ranks like"):
        parse_strategies("torch.x", {"two": ["P(sum)->P(sum)"]})
    with pytest.raises(RuleError, match="list of rows or a mapping"):
        parse_strategies("torch.x", "P(sum)->P(sum)")


def test_a_row_keeps_partial_inputs_the_rule_would_reduce_and_nothing_else_changes():
    rule = ElementwiseRule("torch.addcmul")
    shapes = [(4, 6), (4, 6), (6,)]
    before = rule.infer(_call("torch.addcmul", shapes, [(P,), (R,), (P,)]))
    assert before.inputs == [(R,), (R,), (R,)]
    attach_strategies(rule, ["P(sum),R,P(sum)->P(sum)"])
    after = rule.infer(_call("torch.addcmul", shapes, [(P,), (R,), (P,)]))
    assert after.inputs == [(P,), (R,), (P,)] and after.outputs == ((P,), (4, 6))
    # what the rule offered before is offered unchanged; a combination no row names is the rule's decision
    for pl in ([(Shard(0),), (Shard(0),), (R,)], [(P,), (P,), (R,)]):
        assert rule.infer(_call("torch.addcmul", shapes, pl)).inputs == \
            ElementwiseRule("torch.addcmul").infer(_call("torch.addcmul", shapes, pl)).inputs


def test_rows_compose_per_mesh_dim_with_the_rules_decision_on_a_2d_mesh():
    rule = attach_strategies(AddmmRule("torch.addmm"), {"2,2,2": ["P(sum),R,P(sum)->P(sum)"]})
    shapes = [(4, 5), (4, 6), (6, 5)]
    # mesh dim 0 by the row, mesh dim 1 by the rule (mat1 rows sharded -> output rows sharded)
    d = rule.infer(_call("torch.addmm", shapes, [(P, Shard(0)), (R, Shard(0)), (P, R)], mesh=(2, 2)))
    assert d.inputs == [(P, Shard(0)), (R, Shard(0)), (P, R)]
    assert d.outputs == ((P, Shard(0)), (4, 5))
    # rows keyed by other ranks do not apply
    other = attach_strategies(AddmmRule("torch.addmm"), {"1,2,2": ["P(sum),R,P(sum)->P(sum)"]})
    assert other.infer(_call("torch.addmm", shapes, [(P,), (R,), (P,)])).inputs[0] == (R,)


def test_a_refusing_rule_is_refused_unless_a_row_covers_the_call():
    rule = ForeachRule("torch._foreach_neg")
    lists = ([("__tensor__", 0), ("__tensor__", 1)],)
    call = _call("torch._foreach_neg", [(4, 6), (2, 4, 6)], [(R,), (P,)], args=lists)
    with pytest.raises(RuleError, match="Partial tensors are not supported"):
        rule.infer(call)
    attach_strategies(rule, ["P(sum)->P(sum)"])
    assert rule.infer(call).outputs == [((R,), (4, 6)), ((P,), (2, 4, 6))]
    # in place: a row must keep self's placement (R self, P other is never in place)
    mul_ = attach_strategies(ForeachRule("torch._foreach_mul_", inplace=True), ["P(sum),R->P(sum)", "R,P(sum)->P(sum)"])
    two = ([("__tensor__", 0)], [("__tensor__", 1)])
    assert mul_.infer(_call("torch._foreach_mul_", [(4,), (4,)], [(P,), (R,)], args=two)).outputs is None
    with pytest.raises(RuleError):
        mul_.infer(_call("torch._foreach_mul_", [(4,), (4,)], [(R,), (P,)], args=two))


def test_registry_reads_the_field_and_rejects_bad_rows(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("torch.lerp: {rule: ElementwiseRule, module: hyper_parallel.core.ops.rules.elementwise, "
                    "strategies: ['P(sum),P(sum)->P(sum)']}\n")
    (entry,) = load_yaml_file(good)
    rule = entry.rule_instance()
    assert rule.infer(_call("torch.lerp", [(4,), (4,)], [(P,), (P,)])).inputs == [(P,), (P,)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("torch.lerp: {rule: ElementwiseRule, module: hyper_parallel.core.ops.rules.elementwise, "
                   "strategies: ['P(sum)->']}\n")
    (entry,) = load_yaml_file(bad)
    with pytest.raises(RuleError, match="bad.yaml: torch.lerp: strategies"):
        entry.rule_instance()
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("torch.lerp: {rule: ElementwiseRule, module: m, strategy: []}\n")
    with pytest.raises(RegistryError, match="unknown field"):
        load_yaml_file(unknown)
