# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthesis of ops with non-layout arguments, tables with backend-computed shapes, and ReplicateRule
entries replaced by tables (``hp_agent.dist_op.synth`` / ``resynth``, ``StrategyTableRule`` ``meta`` shapes).

* an op whose samples carry ``kernel_size`` is probed with every placement; a row is kept only if it holds
  for the sample's value and the moved value (``avg_pool1d``: batch and channel shards kept, the pooled dim
  not — although ``kernel_size=1`` alone would keep it);
* the emitted table's shapes are ``meta``: the torch backend computes them from the global shapes without
  data, a name the backend cannot resolve runs replicated;
* the ``repeats`` generator rejects a coincidence a neighbour test hides (``unique_consecutive`` on a
  Partial input looks like a linear flatten on distinct values);
* ``resynth`` proposes the table in place of a ``ReplicateRule`` entry, with UT scenarios, and
  ``apply-updates`` changes the rule and the options in the registry file.
"""
import yaml

from hyper_parallel.core.ops.registry import load_yaml_file
from hyper_parallel.core.ops.rule import OpCall, TensorArg
from hyper_parallel.core.ops.rules.table import META, StrategyTableRule
from hyper_parallel.core.placement import Replicate, Shard

from hp_agent.dist_op.resynth import apply_update, diff_synthesis, write_update
from hp_agent.dist_op.synth import emit, extra_arguments, moved_arguments, synthesize


def _pool_synthesis(kernel):
    import torch
    fn = torch.nn.functional.avg_pool1d
    torch.manual_seed(0)
    sample = ([torch.rand(4, 3, 8) + 0.5], {"kernel_size": kernel})
    pool = [s for s in (sample, moved_arguments(fn, sample)) if s is not None]
    synth = synthesize("torch.nn.functional.avg_pool1d", fn, pool, use_opinfo=False, distinct=False)
    synth.extra_args = extra_arguments(pool)
    return synth


def test_a_row_must_hold_for_the_moved_argument_too():
    synth = _pool_synthesis(1)
    rows = synth.table()["3"]
    assert {"S(0)->S(0)", "S(1)->S(1)", "P(sum)->P(sum)", "R->R"} <= set(rows)
    assert "S(2)->S(2)" not in rows  # holds for kernel_size=1 only: the moved kernel_size=2 rejects it
    entry, questions = emit(synth, {})
    assert not questions and entry["rule"] == "StrategyTableRule"
    assert entry["options"]["shapes"] == {"3": META} and entry["options"]["fallback"] == "replicate"


def _call(op, shape, placement, args=(), kwargs=None):
    return OpCall(op, [TensorArg(0, shape, (placement,))], (("__tensor__", 0),) + tuple(args), kwargs or {}, (2,))


def test_meta_shapes_come_from_the_backend_and_an_unknown_name_runs_replicated():
    rule = StrategyTableRule("torch.nn.functional.avg_pool1d", table={"3": ["R->R", "S(0)->S(0)"]},
                             shapes={"3": META}, fallback="replicate")
    decision = rule.infer(_call("torch.nn.functional.avg_pool1d", (4, 3, 9), Shard(0), (3,)))
    assert decision.inputs == [(Shard(0),)] and tuple(decision.outputs) == ((Shard(0),), (4, 3, 3))
    decision = rule.infer(_call("torch.nn.functional.avg_pool1d", (4, 3, 9), Shard(0), (), {"kernel_size": 2}))
    assert tuple(decision.outputs[1]) == (4, 3, 4)
    other = StrategyTableRule("mindspore.mint.nn.functional.avg_pool1d", table={"3": ["R->R", "S(0)->S(0)"]},
                              shapes={"3": META}, fallback="replicate")
    decision = other.infer(_call("mindspore.mint.nn.functional.avg_pool1d", (4, 3, 9), Shard(0), (3,)))
    assert decision.inputs == [(Replicate(),)] and decision.expand == "expand_replicated"


def test_repeats_generator_rejects_a_neighbour_coincidence():
    import torch
    torch.manual_seed(0)
    sample = [([torch.rand(4, 6)], {})]
    naive = synthesize("torch.unique_consecutive", torch.unique_consecutive, sample, use_opinfo=False,
                       distinct=False, generators=("sample", "arange", "negative", "zeros_ones", "offset")).table()
    assert "P(sum)->P(sum)" in naive["2"]  # distinct values alone make it look like a (linear) flatten
    unique = synthesize("torch.unique_consecutive", torch.unique_consecutive, sample, use_opinfo=False,
                        distinct=False).table()
    assert unique["2"] == ["R->R"]


class _Entry:  # the registry entry fields resynth reads
    rule, strategies, options = "ReplicateRule", None, {}

    def __init__(self, source):
        self.source = source


def test_resynth_replaces_a_replicate_entry_by_the_table(tmp_path):
    import torch
    from hyper_parallel.core.ops.rules.table import ReplicateRule
    registry = tmp_path / "hyper_parallel" / "core" / "ops" / "yaml" / "generated.yaml"
    registry.parent.mkdir(parents=True)
    registry.write_text("torch.nn.functional.avg_pool1d:\n  rule: ReplicateRule\n"
                        "  module: hyper_parallel.core.ops.rules.table\n  doc: \"plans/x.md\"\n")
    synth = _pool_synthesis(2)
    op = "torch.nn.functional.avg_pool1d"
    synth.calls = {"3": ([torch.rand(4, 3, 8)], {"kernel_size": 2})}
    diff = diff_synthesis(op, ReplicateRule(op), synth, torch.nn.functional.avg_pool1d)
    diff.entry = emit(synth, {})[0]
    assert {m.strategy for m in diff.missing} >= {"S(0)->S(0)", "S(1)->S(1)"}
    path = write_update(tmp_path / "plans" / "updates", diff, _Entry(str(registry)))
    change = yaml.safe_load(path.read_text())["change"]
    assert change["rule"] == "StrategyTableRule" and change["options"]["shapes"] == {"3": META}
    assert {"shapes": [[4, 3, 8]], "kwargs": {"kernel_size": 2}, "input": ["S(0)"], "need": ["S(0)"],
            "output": ["S(0)"], "out_shape": [4, 3, 4]} in change["accepted"]
    apply_update(path, tmp_path, "Reviewer <r@x>")
    entry = {e.name: e for e in load_yaml_file(registry)}[op]
    assert entry.rule == "StrategyTableRule" and "..." not in registry.read_text()
    decision = entry.rule_instance().infer(_call(op, (4, 3, 8), Shard(1), (), {"kernel_size": 2}))
    assert decision.inputs == [(Shard(1),)] and tuple(decision.outputs) == ((Shard(1),), (4, 3, 4))


def test_table_scenarios_of_an_op_with_several_outputs_carry_more_outputs():
    import torch
    from types import SimpleNamespace
    from hp_agent.dist_op.resynth import _table_key, table_scenarios
    from hp_agent.dist_op.synth import signature
    args, kwargs = [torch.rand(4, 6)], {"dim": 1}
    key = signature(args, kwargs)
    options = {"layout": {}, "table": {_table_key(key, {}): ["S(0)->S(0),S(0)", "R->R"]}}
    scenarios = table_scenarios("torch.mode", SimpleNamespace(calls={key: (args, kwargs)}), options)
    assert scenarios == [{"shapes": [[4, 6]], "kwargs": {"dim": 1}, "input": ["S(0)"], "need": ["S(0)"],
                          "output": ["S(0)"], "out_shape": [4],
                          "more_outputs": [{"output": ["S(0)"], "out_shape": [4]}]}]
