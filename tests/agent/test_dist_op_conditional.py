# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Conditional strategies (hp_agent.dist_op.conditional): derived conditions on argument values and shard
layouts, planted too-loose conditions rejected by the variants and generators, and verify evaluating a
conditional row exactly as the rule does."""
import torch

from hyper_parallel.core.ops.registry import Registry
from hp_agent.dist_op.conditional import argument_atoms, derive, validate
from hp_agent.dist_op.interface import resolve_torch, torch_interface
from hp_agent.dist_op.synth import GENERATORS
from hp_agent.dist_op.verify import _cloning, _native_ok, verify  # pylint: disable=protected-access
from hp_agent.dist_op.probe import parse_placement


def _x(*shape):
    torch.manual_seed(0)
    return torch.rand(*shape) + 0.5


def _derived(op, args, kwargs=None):
    fn = _cloning(resolve_torch(op))
    return {r.text() for r in derive(op, fn, {"k": [(args, kwargs or {})]}, torch_interface(op), {})}


def test_derive_finds_the_argument_value_and_shard_layout_conditions():
    assert _derived("torch.masked_fill", [_x(4, 6), _x(4, 6) > 1.0, 0.0]) == {"P(sum),R->P(sum) when value@2 == 0"}
    assert _derived("torch.ravel", [_x(4, 6)]) == {"S(0)->S(0) when even"}
    unfold = _derived("Tensor.unfold", [_x(4, 6), 0, 1, 1])
    # S(1) holds whenever the unfolded dim is another one; S(0) only for one-element windows and no empty shard
    assert unfold == {"S(1)->S(1) when dimension@1 != 1",
                      "S(0)->S(0) when size@2 == 1 and step@3 == 1 and nonempty"}


def test_planted_too_loose_conditions_are_rejected():
    unfold = _cloning(resolve_torch("Tensor.unfold"))
    sample = ([_x(4, 6), 0, 1, 1], {})
    step = [a for a in argument_atoms(torch_interface("Tensor.unfold"), *sample) if a.ref == "step@3"]
    # without 'step == 1' a step of 2 picks windows at offsets the shards do not share (5 rows on 2 ranks)
    assert validate("Tensor.unfold", unfold, sample, ("S(0)",), "size@2 == 1 and nonempty", step) is None
    assert validate("Tensor.unfold", unfold, sample, ("S(0)",), "size@2 == 1 and step@3 == 1 and nonempty",
                    step) == ("S(0)",)
    ravel = _cloning(resolve_torch("torch.ravel"))
    assert validate("torch.ravel", ravel, ([_x(4, 6)], {}), ("S(0)",), "nonempty") is None  # uneven on 3 ranks
    # unique_consecutive of S(0) looks right on even shards with pairs of equal values; the runs generator
    # (runs of 5 cross shard boundaries) is what rejects it
    uc = _cloning(resolve_torch("torch.unique_consecutive"))
    weak = [g for g in GENERATORS if g != "runs"]
    assert validate("torch.unique_consecutive", uc, ([_x(4, 6)], {}), ("S(0)",), "even", generators=weak) \
        == ("S(0)",)
    assert validate("torch.unique_consecutive", uc, ([_x(4, 6)], {}), ("S(0)",), "even") is None


def test_verify_checks_inputs_written_in_place():
    bn = _cloning(resolve_torch("torch.nn.functional.batch_norm"))
    args = [_x(4, 3, 2), _x(3), _x(3), _x(3), _x(3)]
    kwargs = {"training": True}
    ref = [bn(*args, **kwargs)]
    r, p = parse_placement("R"), parse_placement("P(sum)")
    # a partial running_var is updated on every rank: the updated buffer is wrong although the output is right
    assert not _native_ok(bn, args, kwargs, [r, r, p, r, r], ref, 2)
    assert _native_ok(bn, args, kwargs, [r, r, r, r, r], ref, 2)


FIXTURE = """
torch.ravel:
  module: hyper_parallel.core.ops.rules.table
  rule: StrategyTableRule
  options: {table: {'1': ['R->R', 'S(0)->S(0)'], '2': ['R->R', 'S(0)->S(0) when even'],
                    '3': ['R->R', 'S(0)->S(0) when even']},
            shapes: {'1': [['0.0']], '2': [['0.0*0.1']], '3': [['0.0*0.1*0.2']]}}
Tensor.ravel:
  module: hyper_parallel.core.ops.rules.table
  rule: StrategyTableRule
  options: {table: {'3': ['R->R', 'S(0)->S(0) when nonempty']}, shapes: {'3': meta}, fallback: replicate}
"""


def test_verify_evaluates_conditional_rows_as_the_rule_does(tmp_path):
    path = tmp_path / "fixture.yaml"
    path.write_text(FIXTURE, encoding="utf-8")
    reg = Registry()
    reg.load_paths([path])
    report = verify(["torch.ravel", "Tensor.ravel"], registry=reg)
    by_op = {o.op: o for o in report.ops}
    assert by_op["torch.ravel"].checked > 0 and not by_op["torch.ravel"].count("false positive")
    assert not [f for f in report.false_negatives if f.op == "torch.ravel" and "S(0)" in f.placements]
    # the planted too-loose condition (non-empty but uneven shards: 5 rows on 2 or 3 ranks) is a false positive
    loose = [f for f in report.false_positives if f.op == "Tensor.ravel"]
    assert loose and all("S(0)" in f.placements and f.sample == "(x5x3x2)" for f in loose)
