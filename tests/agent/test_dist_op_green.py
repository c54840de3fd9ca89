# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
""""Green" is read from the tree: a confirmed plan is green only when its registry entries and case files are
what it renders (its sha included); the gate's ``plans`` check flags every other state, and a batch keeps only
the plans that went green. No test run here: the files are written by the pipeline's own renderer."""
from pathlib import Path

import yaml

from hp_agent.dist_op.batch import BatchRow, _withdraw_failed
from hp_agent.dist_op.green import check_plans, plan_truths
from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, confirm_plan, load_plan, plan_state
from hp_agent.dist_op.scaffold import plan_sha, scaffold

WHO = "Test Person <person@example.org>"


def _plan(root: Path, op: str, confirm: bool = True) -> Path:
    meta = {"op": op, "status": "draft", "path": "A",
            "frontends": {"torch": [op], "mindspore": {"in_scope": False}},
            "interface": {op: {"signature": f"{op}(Tensor self) -> Tensor", "params": [
                {"name": "self", "type": "Tensor", "has_default": False, "keyword_only": False, "tensor": True}]}},
            "rule": {"class": "ElementwiseRule", "module": "hyper_parallel.core.ops.rules.elementwise"},
            "options": {}, "registry": {"file": "ops/generated.yaml", "names": [op]},
            "accepted": [{"shape": [4, 6], "kwargs": {}, "input": ["S(0)"], "need": ["S(0)"], "output": ["S(0)"],
                          "out_shape": [4, 6], "native": True}],
            "rejected": [], "st_cases": [{"shape": [4, 6], "kwargs": {}, "native_min": 2}]}
    plan = Plan(meta, f"\n# Distributed-op plan: `{op}`\n")
    if confirm:
        confirm_plan(plan, WHO)
    path = root / "plans" / f"{op}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    plan.save(path)
    return path


def _layout(root: Path) -> Layout:
    return Layout(root, registry_yaml="ops/generated.yaml", ut_dir="t/ut", st_dir="t/st")


def _messages(layout: Layout) -> list:
    return [f"{f.file}: {f.message}" for f in check_plans(layout)]


def test_a_developed_plan_is_green_and_every_drift_is_named(tmp_path):
    layout = _layout(tmp_path)
    path = _plan(tmp_path, "torch.sinh")
    scaffold(load_plan(path), layout)
    assert _messages(layout) == []
    (truth,) = plan_truths(layout)
    assert truth.green and truth.registered and truth.cases and truth.state == "confirmed"
    registry = tmp_path / "ops/generated.yaml"
    sha = plan_sha(load_plan(path))
    assert f'plan_sha256: "{sha}"' in registry.read_text(encoding="utf-8") and len(sha) == 16

    # the plan re-confirmed after an edit: the entries came from the older version
    plan = load_plan(path)
    plan.body += "\nA reviewer's note.\n"
    confirm_plan(plan, WHO)
    plan.save()
    assert ["re-run dev" in m and "another version of the plan" in m for m in _messages(layout)] == [True]
    scaffold(load_plan(path), layout)
    assert _messages(layout) == []

    # a hand edit of the registry entry, then of a case file
    text = registry.read_text(encoding="utf-8")
    registry.write_text(text.replace("ElementwiseRule", "ReplicateRule"), encoding="utf-8")
    assert ["differs from what the plan renders" in m for m in _messages(layout)] == [True]
    registry.write_text(text, encoding="utf-8")
    case = tmp_path / "t/st/cases/torch.sinh.yaml"
    case.write_text(case.read_text(encoding="utf-8").replace("native_min: 2", "native_min: 1"), encoding="utf-8")
    assert _messages(layout) == [f"{path.relative_to(tmp_path)}: confirmed but not green: t/st/cases/torch.sinh.yaml "
                                 "differs from what the plan renders: re-run dev"]
    case.unlink()
    assert ["t/st/cases/torch.sinh.yaml is missing" in m for m in _messages(layout)] == [True]


def test_confirmed_but_never_developed_and_files_without_a_confirmed_plan(tmp_path):
    layout = _layout(tmp_path)
    _plan(tmp_path, "torch.mvlgamma")                      # confirmed, never developed
    stale = _plan(tmp_path, "torch.frac")
    scaffold(load_plan(stale), layout)
    plan = load_plan(stale)
    plan.body += "\nedited after confirmation\n"
    plan.save()                                            # registered from a plan that is now stale
    orphan = tmp_path / "t/ut/cases/torch.gone.yaml"
    orphan.write_text("op: torch.gone\n", encoding="utf-8")
    messages = _messages(layout)
    assert "plans/torch.mvlgamma.md: confirmed but not green: torch.mvlgamma is not in ops/generated.yaml" in messages
    assert any(m.startswith("ops/generated.yaml: torch.frac: registered from plans/torch.frac.md, which is stale")
               for m in messages)
    assert "t/ut/cases/torch.gone.yaml: case file without a confirmed plan (plans/torch.gone.md)" in messages
    states = {t.op: (t.state, t.green) for t in plan_truths(layout)}
    assert states == {"torch.mvlgamma": ("confirmed", False), "torch.frac": ("stale", False)}


def test_a_batch_withdraws_the_plans_that_failed(tmp_path):
    layout = _layout(tmp_path)
    good, bad = _plan(tmp_path, "torch.sinh"), _plan(tmp_path, "torch.pinverse")
    plans = [load_plan(good), load_plan(bad)]
    for plan in plans:
        scaffold(plan, layout)
    rows = [BatchRow("torch.sinh", "passed", "passed", 1.0, "confirmed"),
            BatchRow("torch.pinverse", "passed", "failed", 1.0, "confirmed")]
    _withdraw_failed(plans, rows, layout)
    assert plan_state(load_plan(good)) == "confirmed"
    withdrawn = load_plan(bad)
    assert plan_state(withdrawn) == "draft"
    assert withdrawn.meta["returned"]["reason"].startswith("dev --batch failed: UT passed; ST failed")
    assert withdrawn.meta["returned"]["confirmation"]["by"] == WHO
    registry = yaml.safe_load((tmp_path / "ops/generated.yaml").read_text(encoding="utf-8"))
    assert list(registry) == ["torch.sinh"]
    assert not (tmp_path / "t/ut/cases/torch.pinverse.yaml").exists()
    assert not (tmp_path / "t/st/cases/torch.pinverse.yaml").exists()
    assert _messages(layout) == []
