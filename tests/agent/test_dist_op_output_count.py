# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ops whose output count follows the call (``vsplit(x, 2)`` returns 2 tensors, ``vsplit(x, 3)`` 3;
``max_pool1d`` 1 or 2 by ``return_indices``): table rows whose last output repeats (``S(1)->S(1)*``).

* ``StrategyTableRule`` repeats a row's ``*`` output to the call's output count (from the ``meta`` shapes),
  gathers inputs no row keeps, and refuses (no fallback) a call no row fits with a message naming both counts;
* ``parse_strategy`` accepts ``*`` on the last output only;
* the synthesis writes such rows for a signature whose samples return different numbers of outputs (plus
  fixed-count rows for what only one count allows: one piece of a split is the whole input), and
  ``resynth``'s UT scenarios fill the repeated output per sample;
* the dispatcher wraps an op returning a one-tensor sequence under one declared output (``vsplit(x, 1)``);
* boolean-dispatched pools name ``return_indices`` after their schema; a ``meta`` signature the backend
  cannot shape (``tensor_split`` with a tensor of indices) gets no rows.
"""
import pytest

from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.table import META, StrategyTableRule, repeated_outputs, parse_strategy
from hyper_parallel.core.placement import Replicate, Shard

VSPLIT = "torch.vsplit"
POOL = "torch.nn.functional.max_pool1d"


def _call(op, shape, placement, args=(), kwargs=None):
    return OpCall(op, [TensorArg(0, shape, (placement,))], (("__tensor__", 0),) + tuple(args), kwargs or {}, (2,))


def _specs(outputs):
    return [(tuple(o.placements), tuple(o.shape)) for o in (outputs if isinstance(outputs, list) else [outputs])]


def test_a_repeated_row_gives_every_output_of_the_call_its_placement():
    rule = StrategyTableRule(VSPLIT, table={"2": ["R->R*", "S(1)->S(1)*"]}, shapes={"2": META}, fallback="replicate")
    two = rule.infer(_call(VSPLIT, (4, 6), Shard(1), (2,)))
    assert two.inputs == [(Shard(1),)] and _specs(two.outputs) == [((Shard(1),), (2, 6))] * 2
    three = rule.infer(_call(VSPLIT, (4, 6), Shard(1), ([1, 3],)))
    assert _specs(three.outputs) == [((Shard(1),), (1, 6)), ((Shard(1),), (2, 6)), ((Shard(1),), (1, 6))]
    split_dim = rule.infer(_call(VSPLIT, (4, 6), Shard(0), (2,)))  # no row keeps the split dim: gathered
    assert split_dim.inputs == [(Replicate(),)] and _specs(split_dim.outputs) == [((Replicate(),), (2, 6))] * 2


def test_return_indices_changes_the_count_and_the_row_follows():
    rule = StrategyTableRule(POOL, table={"3": ["R->R*", "S(0)->S(0)*"]}, shapes={"3": META}, fallback="replicate")
    one = rule.infer(_call(POOL, (4, 3, 8), Shard(0), (2,)))
    assert _specs(one.outputs) == [((Shard(0),), (4, 3, 4))]
    two = rule.infer(_call(POOL, (4, 3, 8), Shard(0), (2,), {"return_indices": True}))
    assert _specs(two.outputs) == [((Shard(0),), (4, 3, 4))] * 2


def test_fixed_rows_of_another_count_are_refused_or_replicated():
    fixed = {"table": {"2": ["R->R,R", "S(1)->S(1),S(1)"]}, "shapes": {"2": META}}
    with pytest.raises(RuleError, match=r"rows give \[2\] output\(s\), this call returns 3"):
        StrategyTableRule(VSPLIT, **fixed).infer(_call(VSPLIT, (6, 4), Shard(1), (3,)))
    replicated = StrategyTableRule(VSPLIT, fallback="replicate", **fixed).infer(_call(VSPLIT, (6, 4), Shard(1), (3,)))
    assert replicated.inputs == [(Replicate(),)] and replicated.expand == "expand_replicated"
    kept = StrategyTableRule(VSPLIT, **fixed).infer(_call(VSPLIT, (6, 4), Shard(1), (2,)))
    assert kept.inputs == [(Shard(1),)]


def test_the_repeat_mark_goes_on_the_last_output_only():
    assert parse_strategy("S(0)->S(0),R*") == (("S(0)",), ("S(0)", "R*"))
    for bad in ("S(0)*->S(0)", "S(0)->S(0)*,R", "S(0)->S(0)**"):
        with pytest.raises(RuleError, match="last output"):
            parse_strategy(bad)
    with pytest.raises(RuleError, match="replicated inputs"):
        StrategyTableRule(VSPLIT, table={"2": ["R->S(0)*"]}, shapes={"2": META})
    assert repeated_outputs(("S(0)", "R*"), 3) == ("S(0)", "R", "R")
    assert repeated_outputs(("S(0)", "R*"), 1) is None and repeated_outputs(("S(0)",), 2) is None


def test_synthesis_writes_repeated_rows_when_the_count_varies():
    import torch
    from hp_agent.dist_op.synth import emit, extra_arguments, synthesize
    torch.manual_seed(0)
    x = torch.rand(6, 4) + 0.5
    pool = [([x, 2], {}), ([x, 3], {})]
    synth = synthesize(VSPLIT, torch.vsplit, pool, use_opinfo=False, distinct=False)
    synth.extra_args = extra_arguments(pool)
    entry, questions = emit(synth, {})
    assert not questions and entry["rule"] == "StrategyTableRule"
    rows = entry["options"]["table"]["2"]
    assert "S(1)->S(1)*" in rows and "R->R*" in rows and not any(r.startswith("S(0)") for r in rows)
    assert entry["options"]["shapes"] == {"2": META}
    rule = StrategyTableRule(VSPLIT, **entry["options"])
    assert _specs(rule.infer(_call(VSPLIT, (6, 4), Shard(1), (6,))).outputs) == [((Shard(1),), (1, 4))] * 6


def test_one_output_of_a_split_is_the_whole_input_and_gets_its_own_row():
    import torch
    from hp_agent.dist_op.synth import emit, synthesize
    torch.manual_seed(0)
    x = torch.rand(6, 4) + 0.5
    synth = synthesize(VSPLIT, torch.vsplit, [([x, 1], {}), ([x, 2], {}), ([x, 3], {})], use_opinfo=False,
                       distinct=False)
    rows = emit(synth, {})[0]["options"]["table"]["2"]
    assert "S(0)->S(0)" in rows and "S(1)->S(1)*" in rows and "S(0)->S(0)*" not in rows
    rule = StrategyTableRule(VSPLIT, table={"2": rows}, shapes={"2": META}, fallback="replicate")
    whole = rule.infer(_call(VSPLIT, (6, 4), Shard(0), (1,)))
    assert whole.inputs == [(Shard(0),)] and _specs(whole.outputs) == [((Shard(0),), (6, 4))]
    assert rule.infer(_call(VSPLIT, (6, 4), Shard(0), (2,))).inputs == [(Replicate(),)]


def test_scenarios_fill_the_repeated_output_per_sample():
    import torch
    from types import SimpleNamespace
    from hp_agent.dist_op.resynth import table_scenarios
    args = [torch.rand(6, 4), 3]
    options = {"layout": {}, "table": {"2": ["S(1)->S(1)*"]}}
    scenarios = table_scenarios(VSPLIT, SimpleNamespace(calls={"2": (args, {})}), options)
    assert scenarios == [{"shapes": [[6, 4]], "kwargs": {"sections": 3}, "input": ["S(1)"], "need": ["S(1)"],
                          "output": ["S(1)"], "out_shape": [2, 4],
                          "more_outputs": [{"output": ["S(1)"], "out_shape": [2, 4]}] * 2}]


def test_one_declared_output_wraps_a_one_tensor_sequence():
    from hyper_parallel.core.ops.dispatch import wrap_outputs
    from hyper_parallel.core.spec import DTensorSpec

    class Local:  # stands for a framework tensor type
        pass

    spec = DTensorSpec(None, (Replicate(),), (1,), validated=True)
    local = Local()
    assert wrap_outputs((local,), spec, Local, lambda t, s: ("wrapped", t, s)) == (("wrapped", local, spec),)
    assert wrap_outputs(local, spec, Local, lambda t, s: ("wrapped", t, s)) == ("wrapped", local, spec)
    with pytest.raises(RuleError, match="declared a tensor output"):
        wrap_outputs((local, local), spec, Local, lambda t, s: t)


def test_boolean_dispatched_pools_name_their_flag_after_the_schema():
    from hp_agent.dist_op.interface import torch_interface
    pool = torch_interface(POOL)
    assert pool.position("return_indices") == 6 and pool.param("return_indices").default is False
    assert torch_interface("torch.nn.functional.adaptive_max_pool2d").position("return_indices") == 2
    assert torch_interface(VSPLIT).param("return_indices") is None


def test_a_meta_signature_the_backend_cannot_shape_gets_no_rows():
    import torch
    from hp_agent.dist_op.synth import emit, extra_arguments, synthesize
    torch.manual_seed(0)
    x = torch.rand(5, 4, 3) + 0.5
    pool = [([x, torch.tensor(2)], {"dim": 0}), ([x, 2], {"dim": 0}), ([x, 3], {"dim": 0})]
    synth = synthesize("torch.tensor_split", torch.tensor_split, pool, use_opinfo=False, distinct=False)
    synth.extra_args = extra_arguments(pool)
    assert "3,0;dim=0" in synth.strategies  # synthesised, but its split indices are data the meta run lacks
    table = emit(synth, {"dim": (2, 0)})[0]["options"]["table"]
    assert "3,0;dim=0" not in table and "S(1)->S(1)*" in table["3;dim=0"]
