# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Kinds of ops the strategy synthesis must handle without per-op code (``hp_agent.dist_op.synth``,
``analysis``, ``interface``, ``samples``, ``analyze``; ``hyper_parallel.core.ops.rules.table``):

* lookups into another input (``isin``): the ``membership`` generator rejects sharding the looked-up input;
* size-1 dims (``cartesian_prod`` of a one-element vector): the size-1-free variant rejects a coincidence;
* a periodic layout argument (``rot90``'s ``k``): found on the op's results, written as the layout's period
  and folded at run time (``k=-5`` uses the ``k=3`` row);
* outputs whose count varies inside one signature (``dsplit``): rows repeated to the call's count
  (``S(1)->S(1)*``, shapes ``meta``) instead of being dropped;
* list-of-tensor parameters, OpInfo names of namespaced ops, leading scalar parameters (``polygamma``),
  an equation that must fit every sample, and a synthesis that crashes in its own process.
"""
import pytest

from hyper_parallel.core.ops.rule import OpCall, TensorArg
from hyper_parallel.core.ops.rules.table import StrategyTableRule
from hyper_parallel.core.placement import Shard

from hp_agent.dist_op.synth import Synthesis, emit, factor_equation, periods_of, synthesize


def _r(*shape):
    import torch
    return torch.rand(shape) + 0.5


def test_membership_generator_rejects_sharding_the_looked_up_input():
    import torch
    table = synthesize("torch.isin", torch.isin, [([_r(4, 6), _r(4, 6)], {})], use_opinfo=False).table()["2,2"]
    assert "S(0),R->S(0)" in table and "S(1),R->S(1)" in table  # elements sharded, test elements whole
    assert not [row for row in table if row.split("->")[0].split(",")[1] != "R"]


def test_size_one_dims_do_not_let_a_coincidence_through():
    import torch
    synth = synthesize("torch.cartesian_prod", torch.cartesian_prod, [([_r(1), _r(2)], {})], use_opinfo=False)
    assert "R,S(0)->S(0)" not in synth.table()["1,1"]  # holds only while the first vector has one element
    assert "R,R->R" in synth.table()["1,1"]


def test_rot90_period_is_found_and_folded_at_run_time():
    import torch
    pool = [([_r(3, 4, 5)], {"k": 3, "dims": [1, 2]})]
    assert periods_of(torch.rot90, pool, {"k": (1, 1), "dims": (2, [0, 1])}) == {"k": 4}
    # roll's shifts repeat with the size of the rolled dim: a property of the sample, not of the op
    assert periods_of(lambda x, shifts=0: torch.roll(x, shifts, 0), [([_r(4, 5)], {"shifts": 1})],
                      {"shifts": (1, 0)}) == {}
    synth = synthesize("torch.rot90", torch.rot90, pool, use_opinfo=False)
    synth.periods = {"k": 4}
    entry, _ = emit(synth, {"k": (1, 1), "dims": (2, [0, 1])})
    assert entry["options"]["layout"]["k"] == [1, 1, 4]
    assert all(int(key.rsplit("k=", 1)[1]) in range(4) for key in entry["options"]["table"])
    rule = StrategyTableRule("torch.rot90", **entry["options"])
    tensors = [TensorArg(0, (3, 4, 5), (Shard(2),))]

    def decide(k):
        return rule.infer(OpCall("torch.rot90", tensors, (("__tensor__", 0),), {"k": k, "dims": [1, 2]}, (2,)))
    # k=3 (and -5, 7: the same rotation) keeps dim 2 sharded as the output's dim 1
    for k, out in ((3, Shard(1)), (-5, Shard(1)), (7, Shard(1))):
        decision = decide(k)
        assert decision.outputs is not None and decision.outputs[0] == (out,), (k, decision)
        assert decision.outputs[1] == tuple(torch.rot90(torch.zeros(3, 4, 5), k, [1, 2]).shape)
    with pytest.raises(Exception, match="period"):
        StrategyTableRule("x", layout={"k": [1, 1, 1]}, table={"1": ["R->R"]}, shapes={"1": [["0.0"]]})


def test_varying_output_count_in_one_signature_repeats_rows():
    import torch
    synth = synthesize("torch.dsplit", torch.dsplit, [([_r(5, 5, 5), [1, 2, 3]], {}), ([_r(5, 5, 6), 2], {})],
                       use_opinfo=False)
    table = synth.table()["3"]
    assert "R->R" in table and "S(1)->S(1)" in table and "S(2)->S(2)" not in table  # split along dim 2
    entry = emit(synth, {})[0]
    assert entry["rule"] == "StrategyTableRule" and entry["options"]["shapes"] == {"3": "meta"}
    assert {"R->R*", "S(0)->S(0)*", "S(1)->S(1)*"} <= set(entry["options"]["table"]["3"])
    assert not any(r.startswith("S(2)") for r in entry["options"]["table"]["3"])


def test_an_equation_must_fit_every_sample():
    synth = Synthesis("torch.cartesian_prod")
    synth.strategies = {"1": [], "1,1": []}
    synth.shapes = {"1": [([(3,)], [(3,)])], "1,1": [([(3,), (4,)], [(12, 2)])]}
    assert factor_equation(synth) is None  # "i->i" explains the one-vector sample only


def test_interfaces_samples_and_opinfo_names_of_awkward_ops():
    from hp_agent.dist_op.analysis import derive
    from hp_agent.dist_op.interface import resolve_torch, torch_interface
    from hp_agent.dist_op.samples import samples_for
    from hp_agent.dist_op.synth import opinfo_name, opinfo_samples
    poly = torch_interface("torch.polygamma")
    assert [(p.name, p.tensor) for p in poly.params] == [("n", False), ("self", True)]
    args, _ = samples_for("torch.polygamma")[0]
    assert args[0] == 1 and args[1].dim() == 2
    assert opinfo_name("torch.linalg.lu_solve") == "linalg.lu_solve"  # not torch.lu_solve (b, LU, pivots)
    assert opinfo_name("torch.linspace") == "linspace.tensor_overload"  # the plain entry has no tensor
    assert all(t.numel() for args, _ in opinfo_samples("torch.cholesky_inverse") for t in args[:1])
    deriv = derive(resolve_torch("torch.block_diag"), torch_interface("torch.block_diag"))
    assert deriv.kind == "unknown" and "list of tensors" in deriv.questions[0]


def test_a_crashing_synthesis_fails_its_op_only(monkeypatch):
    import os
    from hp_agent.dist_op import synth
    from hp_agent.dist_op.analyze import synth_isolated
    from hp_agent.dist_op.interface import AnalyzeError
    assert synth_isolated("torch.outer").equation == "i,j->ij"
    real = synth.synth_op

    def crashes_on_shards(op, replicate_only=False):
        return real(op, replicate_only=True) if replicate_only else os._exit(70)  # pylint: disable=protected-access
    monkeypatch.setattr(synth, "synth_op", crashes_on_shards)
    retried = synth_isolated("torch.outer")  # the second child probes the all-R strategy only
    assert retried.synthesis.replicate_only and retried.entry["rule"] == "ReplicateRule"
    monkeypatch.setattr(synth, "synth_op", lambda op, replicate_only=False: os._exit(70))  # pylint: disable=protected-access
    with pytest.raises(AnalyzeError, match="crashed or hung"):
        synth_isolated("torch.outer")


def test_several_outputs_and_dim_lists_reach_the_cases_and_the_rule():
    import torch
    from hp_agent.dist_op.synth import signature
    synth = synthesize("torch.frexp", torch.frexp, [([_r(4, 6)], {})], use_opinfo=False)
    entry, _ = emit(synth, {})
    rows, _ = synth.plan_cases()
    row = next(r for r in rows if r["input"] == ["S(1)"])
    assert row["output"] == ["S(1)"] and row["more_outputs"] == [{"output": ["S(1)"], "out_shape": [4, 6]}]
    rule = StrategyTableRule("torch.frexp", **entry["options"])
    decision = rule.infer(OpCall("torch.frexp", [TensorArg(0, (4, 6), (Shard(1),))], (("__tensor__", 0),), {}, (2,)))
    assert [spec for spec in decision.outputs] == [((Shard(1),), (4, 6)), ((Shard(1),), (4, 6))]
    # a dim list passed as a tuple keys the table as the rule does (fftshift(dim=(0, -1)))
    key = signature([_r(4, 6)], {"dim": (0, -1)})
    assert key == "2;dim=[0, 1]"
    fft = {"layout": {"dim": [1, None]}, "table": {key: ["R->R"]}, "shapes": {key: [["0.0", "0.1"]]}}
    call = OpCall("torch.fft.fftshift", [TensorArg(0, (4, 6), (Shard(0),))], (("__tensor__", 0),), {"dim": (0, -1)},
                  (2,))
    assert StrategyTableRule("torch.fft.fftshift", **fft).infer(call).outputs is not None  # in the table
