# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Row conditions (``... when CONDITION``, hyper_parallel.core.ops.conditions): the language, malformed
conditions, and conditional rows in a StrategyTableRule table and in an entry's ``strategies``."""
import pytest

from hyper_parallel.core.ops.conditions import parse_condition, split_row
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.rules.table import StrategyTableRule
from hyper_parallel.core.ops.strategies import attach_strategies, parse_row
from hyper_parallel.core.placement import Partial, Replicate, Shard

P, R = Partial("sum"), Replicate()


def _call(shapes, placements, args=(), kwargs=None, mesh=(2,)):
    tensors = [TensorArg(i, s, p) for i, (s, p) in enumerate(zip(shapes, placements))]
    marks = tuple(("__tensor__", i) for i in range(len(shapes)))
    return OpCall("torch.op", tensors, marks + tuple(args), dict(kwargs or {}), mesh)


def test_split_row_and_the_parsed_atoms():
    assert split_row("S(0)->S(0) when even and value@2 == 0") == ("S(0)->S(0)", "even and value@2 == 0")
    assert split_row("S(0)->S(0)") == ("S(0)->S(0)", None)
    cond = parse_condition("kernel_size@1 == stride@2 == 1 and nonempty")
    assert cond.names() == ("kernel_size", "stride") and cond.layout == ("nonempty",)


def test_argument_comparisons_read_position_keyword_default_and_chains():
    cond = parse_condition("kernel_size@1 == stride@2 == 1")
    one = [(4, 6)]
    assert cond.holds(_call(one, [(R,)], (1, 1)), 0, ["R"])
    assert cond.holds(_call(one, [(R,)], (1,), {"stride": 1}), 0, ["R"])  # keyword
    assert cond.holds(_call(one, [(R,)], ((1,), [1])), 0, ["R"])  # one-item sequences equal their item
    assert not cond.holds(_call(one, [(R,)], (2, 2)), 0, ["R"])  # the chain: 2 == 2 but 2 != 1
    assert not cond.holds(_call(one, [(R,)], (1,)), 0, ["R"])  # an absent argument reads None
    assert parse_condition("stride@2 == None").holds(_call(one, [(R,)], (1,)), 0, ["R"])
    assert parse_condition("value@2 != 0").holds(_call(one, [(R,)], (None, 0.5)), 0, ["R"])
    assert parse_condition("training == True").holds(_call(one, [(R,)], (), {"training": True}), 0, ["R"])
    # a bare name is placed by the rule's layout/args option (position, default)
    assert parse_condition("training == False").holds(_call(one, [(R,)]), 0, ["R"], {"training": [5, False]})
    # a tensor argument (its placeholder) never equals a literal
    assert not parse_condition("value@2 == 0").holds(_call([(4, 6), (4, 6), ()], [(R,), (R,), (R,)]), 0,
                                                     ["R", "R", "R"])


def test_layout_atoms_follow_the_shards_of_the_row_on_the_mesh():
    even, nonempty = parse_condition("even"), parse_condition("nonempty")
    assert even.holds(_call([(4, 6)], [(Shard(0),)]), 0, ["S(0)"])
    assert not even.holds(_call([(4, 6)], [(Shard(0),)], mesh=(3,)), 0, ["S(0)"])
    assert even.holds(_call([(4, 6)], [(Shard(1),)], mesh=(3,)), 0, ["S(1)"])
    assert nonempty.holds(_call([(4, 6)], [(Shard(0),)], mesh=(3,)), 0, ["S(0)"]) is False  # chunks 2, 2, 0
    assert nonempty.holds(_call([(5, 6)], [(Shard(0),)], mesh=(3,)), 0, ["S(0)"])  # chunks 2, 2, 1
    # another mesh dim sharding the same tensor dim splits the chunks further
    assert not even.holds(_call([(6, 6)], [(Shard(0), Shard(0))], mesh=(2, 2)), 1, ["S(0)"])
    assert even.holds(_call([(8, 6)], [(Shard(0), Shard(0))], mesh=(2, 2)), 1, ["S(0)"])
    # replicated and partial inputs of the row are not constrained
    assert even.holds(_call([(5, 6), (5, 6)], [(R,), (P,)], mesh=(3,)), 0, ["R", "P(sum)"])


@pytest.mark.parametrize("text, message", [
    ("R->R when", "empty condition"),
    ("R->R when value@2 ==", "expected an argument"),
    ("R->R when 1 == 1", "compares only literals"),
    ("R->R when value@2 < 3", "expected 'TERM == TERM'"),
    ("R->R when even and ", "empty condition|expected 'TERM == TERM'"),
    ("R->R when even or nonempty", "expected 'TERM == TERM'"),
    ("R->R when value@x == 0", "expected an argument"),
])
def test_malformed_conditions_are_rule_errors_naming_the_row(text, message):
    with pytest.raises(RuleError, match=message):
        StrategyTableRule("torch.op", table={"2": [text]}, shapes={"2": [["0.0"]]})
    if not text.startswith("R->R when even"):
        with pytest.raises(RuleError, match="torch.op"):
            parse_row(text.replace("R->R", "S(0)->S(0)"), "torch.op: strategies")


def test_a_table_row_is_offered_only_where_its_condition_holds():
    rule = StrategyTableRule("torch.ravel", table={"2": ["R->R", "S(0)->S(0) when even"]},
                             shapes={"2": [["0.0*0.1"]]})
    kept = rule.infer(_call([(4, 6)], [(Shard(0),)]))
    assert kept.inputs == [(Shard(0),)] and kept.outputs == ((Shard(0),), (24,))
    # uneven shards on 3 ranks: the row is not offered; the decision falls back to gathering
    gathered = rule.infer(_call([(4, 6)], [(Shard(0),)], mesh=(3,)))
    assert gathered.inputs == [(R,)] and gathered.outputs == ((R,), (24,))
    assert rule.cache_args == ()  # a layout condition reads no argument


def test_an_argument_condition_in_a_table_and_in_strategies_rows():
    table = StrategyTableRule("torch.masked_fill", args={"value": [2, None]},
                              table={"2,2": ["R,R->R", "P(sum),R->P(sum) when value == 0"]},
                              shapes={"2,2": [["0.0", "0.1"]]})
    assert table.cache_args == ("value",)
    shapes, given = [(4, 6), (4, 6)], [(P,), (R,)]
    assert table.infer(_call(shapes, given, (0.0,))).inputs == [(P,), (R,)]
    assert table.infer(_call(shapes, given, (2.5,))).inputs == [(R,), (R,)]
    rows = attach_strategies(ElementwiseRule("torch.masked_fill"), ["P(sum),R->P(sum) when value@2 == 0"])
    assert rows.infer(_call(shapes, given, (0,))).inputs == [(P,), (R,)]
    assert rows.infer(_call(shapes, given, (1.0,))).inputs == [(R,), (R,)]
    with pytest.raises(RuleError, match="args.value"):
        StrategyTableRule("torch.op", args={"value": 2}, table={"2": ["R->R"]}, shapes={"2": [["0.0"]]})
