# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Re-derivation of registered ops (``hp_agent.dist_op.resynth``): the synthesis diffed against a rule.

* a strategy planted as missing (``torch.mul`` with a rule that reduces Partial inputs) is proposed, with
  its evidence; a strategy the rule already has (a row) is covered and kept in the merged proposal;
* nothing valid is removed: every combination the rule kept before applying the proposal is kept after;
* a coincidence of the sample's numbers (``masked_fill`` with ``value=0`` keeps ``P(sum)``) is not proposed;
* a plan update is written, applied to a registry file (one-line and block entries) with who/when/sha256,
  and the registry then offers the strategy.
"""
import itertools

import pytest
import yaml

from hyper_parallel.core.ops.registry import load_yaml_file
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.strategies import attach_strategies

from hp_agent.dist_op.resynth import UpdateError, apply_update, diff_synthesis, edit_entry, proposal, write_update
from hp_agent.dist_op.synth import synthesize

SHAPES = ((4, 6), (4, 6))


def _sample():
    import torch
    torch.manual_seed(0)
    return [torch.rand(SHAPES[0]) + 0.5, torch.rand(SHAPES[1]) + 0.5], {}


def _synth(op, fn, sample):
    return synthesize(op, fn, [sample], use_opinfo=False, ranks=(2,), distinct=False, max_samples=1)


class _Entry:  # the registry entry fields the proposal reads
    def __init__(self, rule, strategies=None, options=None):
        self.rule, self.strategies, self.options = rule, strategies, options or {}
        self.source = "hyper_parallel/core/ops/yaml/elementwise.yaml"


def _kept(rule, op, sample):
    """Every (R, S(d), P(sum)) combination the rule keeps without redistribution."""
    from hp_agent.dist_op.resynth import _rule_view  # pylint: disable=protected-access
    opts = ["R", "S(0)", "S(1)", "P(sum)"]
    return {c for c in itertools.product(opts, opts)
            if _rule_view(rule, op, sample[0], sample[1], c) == "keeps"}


def test_planted_missing_strategy_is_proposed_and_nothing_valid_is_removed():
    import torch
    sample = _sample()
    synth = _synth("torch.mul", torch.mul, sample)
    # planted: the rule reduces every Partial input (partial: none) but has one row already
    rule = attach_strategies(ElementwiseRule("torch.mul"), ["R,P(sum)->P(sum)"])
    before = _kept(rule, "torch.mul", sample)
    diff = diff_synthesis("torch.mul", rule, synth, torch.mul)
    assert [m.strategy for m in diff.missing] == ["P(sum),R->P(sum)"]
    assert diff.missing[0].rule_does.startswith("redistributes") and diff.missing[0].evidence == "(4x6, 4x6)"
    assert diff.covered >= 3  # S(0),S(0) / S(1),S(1) / R,P(sum) are kept by the rule
    change = proposal(diff, _Entry("ElementwiseRule", ["R,P(sum)->P(sum)"]))
    assert change == {"kind": "strategies", "strategies": ["R,P(sum)->P(sum)", "P(sum),R->P(sum)"]}
    fixed = attach_strategies(ElementwiseRule("torch.mul"), change["strategies"])
    after = _kept(fixed, "torch.mul", sample)
    assert before <= after and after - before == {("P(sum)", "R")}
    assert not diff_synthesis("torch.mul", fixed, synth, torch.mul).missing


def test_a_coincidence_of_the_samples_numbers_is_not_proposed():
    import torch
    x = torch.rand(4, 6) + 0.5
    mask = torch.arange(24).reshape(4, 6) % 3 == 0
    synth = _synth("torch.masked_fill", torch.masked_fill, ([x, mask, 0.0], {}))
    assert "P(sum),R->P(sum)" in synth.table()["2,2"]  # value=0: the partial sum survives the fill
    diff = diff_synthesis("torch.masked_fill", ElementwiseRule("torch.masked_fill"), synth, torch.masked_fill)
    assert not diff.missing and [m.strategy for m in diff.coincidences] == ["P(sum),R->P(sum)"]
    assert proposal(diff, _Entry("ElementwiseRule")) is None


ONE_LINE = "__default__:\n  module: hyper_parallel.core.ops.rules.elementwise\n  rule: ElementwiseRule\n" \
           "# comment kept\ntorch.mul: {}\ntorch.div: {options: {partial: numerator}}\n"
BLOCK = "torch.mul:\n  rule: ElementwiseRule\n  module: hyper_parallel.core.ops.rules.elementwise\n" \
        "  doc: \"plans/torch.mul.md\"\ntorch.div:\n  rule: ElementwiseRule\n" \
        "  module: hyper_parallel.core.ops.rules.elementwise\n"


@pytest.mark.parametrize("text", [ONE_LINE, BLOCK])
def test_update_is_written_applied_with_a_record_and_the_registry_offers_it(tmp_path, text):
    import torch
    from hyper_parallel.core.placement import Partial, Replicate
    from hyper_parallel.core.ops.rule import OpCall, TensorArg
    registry = tmp_path / "hyper_parallel" / "core" / "ops" / "yaml" / "elementwise.yaml"
    registry.parent.mkdir(parents=True)
    registry.write_text(text)
    sample = _sample()
    diff = diff_synthesis("torch.mul", ElementwiseRule("torch.mul"), _synth("torch.mul", torch.mul, sample), torch.mul)
    entry = _Entry("ElementwiseRule")
    entry.source = str(registry)
    path = write_update(tmp_path / "plans" / "updates", diff, entry)
    data = yaml.safe_load(path.read_text())
    assert data["status"] == "proposed" and data["registry"] == "hyper_parallel/core/ops/yaml/elementwise.yaml"
    record = apply_update(path, tmp_path, "Reviewer <r@x>")
    assert record["by"] == "Reviewer <r@x>" and len(record["sha256"]) == 64
    assert yaml.safe_load(path.read_text())["status"] == "applied"
    new_text = registry.read_text()
    assert ("# comment kept" in new_text) == ("# comment kept" in text)
    entries = {e.name: e for e in load_yaml_file(registry)}
    assert entries["torch.div"].strategies is None  # the other entry is untouched
    call = OpCall("torch.mul", [TensorArg(0, (4, 6), (Partial("sum"),)), TensorArg(1, (4, 6), (Replicate(),))],
                  (("__tensor__", 0), ("__tensor__", 1)), {}, (2,))
    assert entries["torch.mul"].rule_instance().infer(call).inputs[0] == (Partial("sum"),)
    with pytest.raises(UpdateError, match="already applied"):
        apply_update(path, tmp_path, "Reviewer <r@x>")


def test_edit_entry_refuses_an_op_the_file_does_not_hold():
    with pytest.raises(UpdateError, match="torch.nope: no entry"):
        edit_entry(ONE_LINE, "torch.nope", "strategies", ["P(sum)->P(sum)"])
