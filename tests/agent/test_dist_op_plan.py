# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Plan files: front matter round trip, [TBD] detection, confirmation and the stale hash."""
import datetime

import pytest

from hp_agent.dist_op.plan import Plan, PlanError, confirm_plan, content_hash, find_tbd, load_plan, plan_state, \
    set_field

TEXT = """---
op: torch.roll
path: A
frontends:
  torch: [torch.roll]
  mindspore: {installed: false, names: [], in_scope: '[TBD] is MindSpore in scope?'}
accepted:
- {shape: [4, 6], input: [S(0)], need: [R]}
status: draft
---

# Plan
Body text.
"""


def test_round_trip_keeps_meta_and_body(tmp_path):
    plan = Plan.parse(TEXT)
    assert plan.op == "torch.roll" and plan.meta["accepted"][0]["shape"] == [4, 6]
    path = plan.save(tmp_path / "plans" / "torch.roll.md")
    again = load_plan(path)
    assert again.meta == plan.meta and again.body == plan.body
    assert again.render() == plan.render()


@pytest.mark.parametrize("bad, message", [
    ("no front matter", "starts with a '---'"),
    ("---\nop: x\n", "not closed"),
    ("---\n- a\n---\n", "must be a mapping"),
    ("---\nop: x\n---\n", "lacks 'status'"),
])
def test_parse_errors_name_the_problem(bad, message):
    with pytest.raises(PlanError, match=message):
        Plan.parse(bad)


def test_tbd_found_in_front_matter_and_body():
    plan = Plan.parse(TEXT + "- [TBD] which dims?\n")
    items = find_tbd(plan)
    assert len(items) == 2 and any("which dims" in i for i in items)


def test_confirm_refuses_with_tbd_then_records(tmp_path):
    plan = Plan.parse(TEXT, tmp_path / "p.md")
    with pytest.raises(PlanError, match=r"1 \[TBD\] item"):
        confirm_plan(plan, "A Person")
    set_field(plan, "frontends.mindspore.in_scope=false")
    assert plan.meta["frontends"]["mindspore"]["in_scope"] is False
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    record = confirm_plan(plan, "A Person <a@example.org>", when)
    assert record == {"by": "A Person <a@example.org>", "at": "2026-01-02T03:04:05Z", "sha256": content_hash(plan)}
    assert plan_state(plan) == "confirmed"


def test_edit_after_confirmation_is_stale(tmp_path):
    plan = Plan.parse(TEXT.replace("'[TBD] is MindSpore in scope?'", "false"), tmp_path / "p.md")
    confirm_plan(plan, "A Person")
    path = plan.save()
    assert plan_state(load_plan(path)) == "confirmed"
    path.write_text(path.read_text(encoding="utf-8").replace("need: [R]", "need: [S(0)]"), encoding="utf-8")
    assert plan_state(load_plan(path)) == "stale"
    body_edit = Plan.parse(plan.render().replace("Body text.", "Other text."))
    assert plan_state(body_edit) == "stale"
    assert plan_state(Plan.parse(TEXT)) == "draft"


def test_set_field_errors():
    plan = Plan.parse(TEXT)
    with pytest.raises(PlanError, match="KEY=VALUE"):
        set_field(plan, "path")
    with pytest.raises(PlanError, match="no field 'nope'"):
        set_field(plan, "frontends.nope=1")
    with pytest.raises(PlanError, match="not a settable field"):
        set_field(plan, "status=confirmed")


def test_set_field_stores_strings_unless_the_schema_types_the_field():
    plan = Plan.parse(TEXT)
    set_field(plan, "frontends.mindspore.in_scope=false")  # a [TBD] placeholder, typed bool by the schema
    assert plan.meta["frontends"]["mindspore"]["in_scope"] is False
    plan.meta["reason"] = "[TBD] why"
    assert set_field(plan, "reason=a: b") == ("reason", "a: b")  # text, never a mapping
    assert set_field(plan, "reason=true") == ("reason", "true")
    with pytest.raises(PlanError, match="expected true or false"):
        set_field(plan, "frontends.mindspore.in_scope=maybe")
