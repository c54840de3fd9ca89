# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthesis and resynth fixes for ops verify reported false negatives on (session 5, ``distop-gen``).

* a dim argument naming one of ``ndim + 1`` positions (``unsqueeze_copy``'s ``dim``: ``-1`` inserts after
  the last dim) is keyed modulo ``ndim + 1`` by the synthesis and by the table rule (``dim=-1`` and
  ``dim=2`` of a 3-D input used to share one signature, and their rows cancelled out);
* an op with leading scalars (``polygamma(n, x)``) gets UT scenarios, and the UT call passes the scalars
  first (the backend computes ``meta`` shapes from that call);
* resynth proposes a strategy whose moved numbers the op refuses on one device too (``lu_factor``'s
  ``pivot=False`` on CPU), as the synthesis and verify's scopes do;
* a table layout with a period (``rot90``'s ``k``) gives table keys with defaults filled in (resynth used to
  crash unpacking it).
"""
import functools
from types import SimpleNamespace

import pytest

from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.table import INSERTED, META, StrategyTableRule
from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.testing.op_cases import rule_call

from hp_agent.dist_op.resynth import _holds_shifted, _table_key, table_scenarios
from hp_agent.dist_op.synth import LAYOUT_KWARGS, Strategy, emit, inserted_dims, signature, synthesize


@functools.lru_cache(maxsize=1)  # one synthesis for the three tests that read it (none changes it)
def _unsqueeze_synthesis():
    import torch
    torch.manual_seed(0)
    x = torch.rand(3, 4, 5) + 0.5
    pool = [([x], {"dim": 2}), ([x], {"dim": -1})]
    return synthesize("torch.unsqueeze_copy", torch.unsqueeze_copy, pool, use_opinfo=False, distinct=False,
                      generators=("sample", "arange"), partials=("sum",))


def test_an_inserted_dim_is_keyed_modulo_ndim_plus_one():
    import torch
    x = torch.rand(3, 4, 5)
    assert inserted_dims(torch.unsqueeze_copy, [([x], {"dim": 0})]) == ["dim"]
    assert inserted_dims(torch.select, [([x], {"dim": 0, "index": 1})]) == []  # select(x, dim=3) raises
    assert signature([x], {"dim": -1}, inserted=["dim"]) == "3;dim=3"
    assert signature([x], {"dim": -1}) == "3;dim=2"  # a dim over ndim positions (the default)
    table = _unsqueeze_synthesis().table()
    assert "S(2)->S(3)" in table["3;dim=2"] and "S(2)->S(2)" in table["3;dim=3"]  # were intersected away


def test_the_table_rule_keys_an_inserted_dim_like_the_synthesis():
    entry, questions = emit(_unsqueeze_synthesis(), {"dim": (1, None)})
    assert not questions and entry["options"]["layout"] == {"dim": [1, None, INSERTED]}
    rule = StrategyTableRule("torch.unsqueeze_copy", **entry["options"])
    for dim, out in ((-1, Shard(2)), (3, Shard(2)), (2, Shard(3)), (-2, Shard(3))):
        call = OpCall("torch.unsqueeze_copy", [TensorArg(0, (3, 4, 5), (Shard(2),))], (("__tensor__", 0), dim),
                      {}, (2,))
        decision = rule.infer(call)
        assert decision.inputs == [(Shard(2),)] and decision.outputs[0] == (out,), dim
    with pytest.raises(RuleError, match="inserted"):
        StrategyTableRule("torch.unsqueeze_copy", layout={"dim": [1, None, "after"]}, table={"2": ["R->R"]},
                          shapes={"2": META})


def test_leading_scalars_get_scenarios_and_the_ut_call_passes_them_first():
    import torch
    args, kwargs = [1, torch.rand(4, 6)], {}
    key = signature(args, kwargs)
    options = {"layout": {}, "table": {_table_key(key, {}): ["R->R", "S(1)->S(1)"]}, "shapes": {key: META},
               "fallback": "replicate"}
    scenarios = table_scenarios("torch.polygamma", SimpleNamespace(calls={key: (args, kwargs)}), options)
    assert {"shapes": [[4, 6]], "kwargs": {"n": 1}, "input": ["S(1)"], "need": ["S(1)"], "output": ["S(1)"],
            "out_shape": [4, 6]} in scenarios
    rule = StrategyTableRule("torch.polygamma", **options)
    for positional in (False, True):
        call = rule_call("torch.polygamma", scenarios[-1], ["S(1)"], positional, {"n": 0}, {})
        assert call.args == (1, ("__tensor__", 0)) and call.kwargs == {}
        decision = rule.infer(call)  # meta shapes: torch.polygamma(1, <meta 4x6>)
        assert decision.inputs == [(Shard(1),)] and tuple(decision.outputs) == ((Shard(1),), (4, 6))
    plain = rule_call("torch.nn.functional.softmax", {"shape": [4, 6], "kwargs": {"dim": 1}}, ["R"], True,
                      {"dim": 1}, {})
    assert plain.args == (("__tensor__", 0), 1) and plain.tensors[0].placements == (Replicate(),)


def test_a_strategy_whose_moved_numbers_the_op_refuses_is_proposed():
    import torch
    torch.manual_seed(0)
    x = torch.rand(3, 4, 4) + 0.5
    batch = Strategy(("S(0)",), ("S(0)", "S(0)"))
    assert _holds_shifted(torch.linalg.lu_factor, [x], {"pivot": True}, batch, LAYOUT_KWARGS)  # pivot=False raises
    # numbers that move and run still decide: masked_fill's value=0 keeps P(sum) by coincidence only
    mask = torch.rand(4, 6) > 0.5
    partial = Strategy(("P(sum)", "R"), ("P(sum)",))
    assert not _holds_shifted(torch.masked_fill, [torch.rand(4, 6), mask, 0.0], {}, partial, LAYOUT_KWARGS)


def test_table_key_of_a_periodic_layout_fills_defaults():
    assert _table_key("2;k=1", {"k": [1, 1, 4], "dims": [2, [0, 1]]}) == "2;dims=[0, 1];k=1"
    assert _table_key("3", {"dim": [1, -1, INSERTED]}) == "3;dim=3"


def test_a_regenerated_table_marks_the_inserted_dim_and_keeps_old_rows():
    from hp_agent.dist_op.resynth import Missing, OpDiff, _regenerated_table
    synthesis = _unsqueeze_synthesis()
    entry = SimpleNamespace(options={"layout": {"dim": [1, None]}, "table": {"3;dim=2": ["R->R", "S(0)->S(0)"]},
                                     "shapes": {"3;dim=2": META}, "fallback": "replicate"})
    diff = OpDiff("torch.unsqueeze_copy", "StrategyTableRule", "", synthesis=synthesis,
                  missing=[Missing("3;dim=3", "S(2)->S(2)", "", "redistributes")])
    options = _regenerated_table(diff, entry)
    assert options["layout"] == {"dim": [1, None, INSERTED]}
    assert options["table"]["3;dim=2"] == ["R->R", "S(0)->S(0)"] and "S(2)->S(2)" in options["table"]["3;dim=3"]


def test_a_constant_result_proves_no_output_placement_but_still_disproves():
    import torch
    torch.manual_seed(0)
    y, x = torch.rand(3, 2) + 0.5, torch.rand(3, 2) + 0.5
    one = torch.rand(3, 1) + 0.5  # trapz over one point: 0 everywhere, whatever the placements
    pool = [([y, x], {"dim": 1}), ([one, one], {"dim": 1})]
    table = synthesize("torch.trapz", torch.trapz, pool, use_opinfo=False, distinct=False,
                       generators=("sample", "arange", "repeats"), partials=("sum",)).table()
    # repeats makes every difference 0 (a constant result): it used to leave only R and wipe P(sum)
    assert {"P(sum),R->P(sum)", "R,P(sum)->P(sum)", "S(0),S(0)->S(0)"} <= set(table["2,2;dim=1"])
    assert "S(1),S(1)->S(0)" not in table["2,2;dim=1"]  # the integrated dim sharded: wrong on real values
    alone = synthesize("torch.trapz", torch.trapz, pool[1:], use_opinfo=False, distinct=False,
                       generators=("sample",), partials=("sum",)).table()
    assert "S(0),S(0)->S(0)" in alone["2,2;dim=1"]  # constant results only: their own strategies stand


def test_a_positional_layout_argument_before_other_arguments_is_keyed():
    import torch
    from hp_agent.dist_op.interface import torch_interface
    from hp_agent.dist_op.synth import _keywordize
    x = torch.rand(3, 4)
    sample = ([x, x, 1.0, "use_mm_for_euclid_dist"], {})
    args, kwargs = _keywordize(sample, torch_interface("torch.cdist"), LAYOUT_KWARGS, torch.cdist)
    assert len(args) == 2 and kwargs == {"p": 1.0, "compute_mode": "use_mm_for_euclid_dist"}
    assert signature(args, kwargs) == "2,2;p=1.0"  # was keyed "2,2" (the default p=2.0) with p=1.0 rows


def test_a_dtype_argument_goes_through_a_ut_scenario_as_its_name():
    import torch
    from hp_agent.dist_op.resynth import _named_call
    op = "torch.ops.aten._softmax_backward_data"
    shapes, named = _named_call(op, [torch.rand(4, 6), torch.rand(4, 6), 1, torch.float32], {})
    assert shapes == [[4, 6], [4, 6]] and named == {"dim": 1, "input_dtype": "torch.float32"}
    call = rule_call(op, {"shapes": shapes, "kwargs": named}, ["R", "R"], True, {"dim": 2, "input_dtype": 3}, {})
    assert call.args[2:] == (1, torch.float32)
    keep = rule_call(op, {"shapes": shapes, "kwargs": {"mode": "torch.nothing"}}, ["R", "R"], False, {}, {})
    assert keep.kwargs == {"mode": "torch.nothing"}  # not a dtype name: the string stays
