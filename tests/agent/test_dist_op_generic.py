# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Generic pipeline fixes for kinds of ops the batch runs met (no Python per op):

* a weak coupling between elements (``local_response_norm``: ``alpha = 1e-4``) is caught because partial-free
  assemblies are compared with a tight tolerance;
* a partial output that also assembles where every rank holds the value (a loss of 0) is a coincidence;
* a non-layout argument that changes the output count (``return_indices``) does not empty a replicate-only
  table; tensor inputs written in place (running statistics) become ``ReplicateRule(mutates=...)``, which
  refuses them sharded; replicated inputs never give a sharded output in a table;
* OpInfo names of aten overloads, ``*_with_indices`` functions and ``nn.functional`` ops; one plan per
  aten overload; OpInfo samples that contradict the probe's element-wise form send an op to the synthesis.
"""
import pytest

from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.ops.rules.table import ReplicateRule, StrategyTableRule
from hyper_parallel.core.placement import Replicate, Shard

from hp_agent.dist_op.interface import base_name
from hp_agent.dist_op.synth import _opinfo_names, emit, synthesize  # pylint: disable=protected-access


def _r(*shape):
    import torch
    return torch.rand(shape) + 0.5


def _call(op, shapes, placements, mesh=(2,)):
    tensors = [TensorArg(i, tuple(s), tuple(p)) for i, (s, p) in enumerate(zip(shapes, placements))]
    return OpCall(op, tensors, tuple(("__tensor__", i) for i in range(len(shapes))), {}, mesh)


def test_weak_coupling_between_rows_is_not_taken_for_a_shard():
    import torch

    def lrn_like(x):  # each row sees its neighbour through a 1e-5 factor (below the loose rtol of 1e-4)
        return x * (1 + 1e-5 * torch.roll(x, 1, 0))
    table = synthesize("lrn_like", lrn_like, [([_r(4, 6)], {})], use_opinfo=False).table()["2"]
    assert "S(1)->S(1)" in table and "S(0)->S(0)" not in table


def test_a_zero_result_is_replicated_not_partial():
    import torch
    table = synthesize("zero_loss", lambda x: (x * 0).sum(), [([_r(4, 6)], {})], use_opinfo=False).table()["2"]
    assert "R->R" in table and "R->P(sum)" not in table


def test_replicate_only_tables_ignore_the_output_count_and_record_in_place_writes():
    def pool(x, with_indices):
        return (x * 2, x.argmax(-1)) if with_indices else x * 2
    synth = synthesize("pool", pool, [([_r(4, 6), True], {}), ([_r(4, 6), False], {})], use_opinfo=False,
                       replicate_only=True)
    assert synth.table() == {"2": ["R->R"]}

    def norm(x, stats):
        stats.add_(x.mean(0))  # running statistics, written in place
        return x - stats
    synth = synthesize("norm", norm, [([_r(4, 6), _r(6)], {})], use_opinfo=False, replicate_only=True)
    assert synth.mutated == [1]
    entry, _ = emit(synth, {})
    assert entry == {"rule": "ReplicateRule", "module": "hyper_parallel.core.ops.rules.table",
                     "options": {"mutates": [1]}}
    rule = ReplicateRule("norm", mutates=[1])
    assert rule.infer(_call("norm", [(4, 6), (6,)], [(Shard(0),), (Replicate(),)])).inputs == [(Replicate(),)] * 2
    with pytest.raises(RuleError, match="tensor input 1 is written in place"):
        rule.infer(_call("norm", [(4, 6), (6,)], [(Replicate(),), (Shard(0),)]))
    with pytest.raises(RuleError, match="mutates"):
        ReplicateRule("norm", mutates=["x"])


def test_a_table_row_sharding_replicated_inputs_is_refused():
    with pytest.raises(RuleError, match="replicated inputs give replicated outputs"):
        StrategyTableRule("x", layout={}, table={"2,2": ["R,R->S(0)"]}, shapes={"2,2": [["0.0"]]})


def test_opinfo_names_and_plan_names_of_overloads_and_with_indices_functions():
    assert _opinfo_names("torch.nn.functional.unfold")[:2] == ["torch.nn.functional.unfold", "nn.functional.unfold"]
    assert _opinfo_names("Tensor.unfold")[1] == "unfold"
    assert "nn.functional.max_pool2d" in _opinfo_names("torch.nn.functional.max_pool2d_with_indices")
    assert "slice" in _opinfo_names("torch.ops.aten.slice.Tensor")
    assert "nn.functional.bilinear" in _opinfo_names("torch.bilinear")
    assert base_name("torch.ops.aten.slice.Tensor") == "slice"
    assert base_name("torch.ops.aten._safe_softmax.default") == "_safe_softmax"
    assert base_name("torch.nn.functional.glu") == "glu"


def test_opinfo_samples_that_do_not_broadcast_refute_an_elementwise_probe(monkeypatch):
    from types import SimpleNamespace
    from hp_agent.dist_op import analyze, synth
    elementwise = SimpleNamespace(kind="elementwise")
    monkeypatch.setattr(synth, "opinfo_samples", lambda op, limit=4: [([_r(4, 6), _r(2, 6)], {"start": 0, "end": 2})])
    assert analyze._opinfo_contradicts("torch.slice_scatter", elementwise)  # pylint: disable=protected-access
    monkeypatch.setattr(synth, "opinfo_samples", lambda op, limit=4: [([_r(4, 6), _r(6)], {})])
    assert not analyze._opinfo_contradicts("torch.add", elementwise)  # pylint: disable=protected-access
    assert not analyze._opinfo_contradicts("torch.add", SimpleNamespace(kind="except_dim"))  # pylint: disable=protected-access


def test_a_table_of_replicated_rows_only_is_a_replicate_rule():
    def first_scaled(x):  # every output element depends on x[0, 0]: no shard or partial assembles
        return x * x.flatten()[0]
    synth = synthesize("first_scaled", first_scaled, [([_r(4, 6)], {})], use_opinfo=False)
    assert synth.table() == {"2": ["R->R"]}
    assert emit(synth, {}) == ({"rule": "ReplicateRule", "module": "hyper_parallel.core.ops.rules.table"}, [])


def test_samples_of_an_op_tested_through_a_wrapper_are_captured_from_its_calls(monkeypatch):
    from types import SimpleNamespace
    import torch
    from hp_agent.dist_op import synth

    def wrapper(x, k):  # what OpInfo calls: our op runs inside, on values the wrapper makes
        return torch.mul(x.relu(), k)
    sample = SimpleNamespace(input=_r(3, 4), args=(2.0,), kwargs={})
    info = SimpleNamespace(op=wrapper, sample_inputs=lambda *a, **k: iter([sample]))
    monkeypatch.setattr(synth, "_opinfos", lambda op: [info])
    calls = synth.captured_samples("torch.mul", torch.mul)
    assert len(calls) == 1 and calls[0][0][1] == 2.0 and torch.equal(calls[0][0][0], sample.input.relu())


def test_an_op_returning_a_sparse_tensor_is_refused_clearly(tmp_path):
    from hp_agent.dist_op.analyze import analyze
    from hp_agent.dist_op.interface import AnalyzeError
    from hp_agent.dist_op.layout import load_layout
    with pytest.raises(AnalyzeError, match="Tensor.to_sparse: returns a torch.sparse_coo tensor"):
        analyze(["Tensor.to_sparse"], load_layout(tmp_path))
