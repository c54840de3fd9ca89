# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the repository says about each plan: green is a fact derived from the tree, never a local marker.

A plan is **green** when it is confirmed (its content still hashes to the confirmation's sha256), every
frontend name it lists is in the registry file exactly as ``dev`` renders it from this plan (rule, module,
options, ``doc``, and ``plan_sha256`` = the first digits of the confirmation sha256), and its UT and ST case
files exist with exactly the rendered text. The gate's ``ut`` and ``st`` stages run those case files, so on
a tree whose gate passed every green plan's tests passed.

:func:`check_plans` is the gate's ``plans`` stage (no processes, ~1 s): every confirmed plan is green;
every pipeline registry entry (``doc: plans/...``) points at a confirmed plan that produced it (sha match);
no case file is left without its plan. :func:`plan_truths` feeds ``hp-agent dist-op status``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import SAFE_LOADER, Plan, PlanError, load_plan, plan_state, slug_of
from hp_agent.dist_op.scaffold import planned_entry, planned_files, plan_sha, render_cases
from hp_agent.findings import Finding

__all__ = ["PlanTruth", "plan_truth", "plan_truths", "check_plans", "plan_paths"]

_RULE = "plan-green"


@dataclass
class PlanTruth:
    """One plan as the tree shows it. ``reason`` says why it is not green ('' when it is)."""

    plan: str
    op: str
    state: str
    registered: bool
    cases: bool
    green: bool
    reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """The JSON form of ``dist-op status --json``."""
        return {"plan": self.plan, "op": self.op, "state": self.state, "registered": self.registered,
                "cases": self.cases, "green": self.green, "reason": self.reason}


def plan_paths(layout: Layout) -> List[Path]:
    """Every plan file under the plans folder (reports excluded), sorted."""
    return sorted(p for p in layout.path(layout.plans_dir).glob("*.md") if not p.name.endswith(".report.md"))


def _registry(layout: Layout) -> Dict[str, Dict[str, Any]]:
    target = layout.path(layout.registry_yaml)
    if not target.is_file():
        return {}
    return yaml.load(target.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}


def _entry_problem(plan: Plan, layout: Layout, registry: Dict[str, Dict[str, Any]]) -> str:
    """'' when every name of the plan is registered as dev renders it, else what differs (first name)."""
    expected = planned_entry(plan)
    doc = f"{layout.plans_dir}/{slug_of(plan.op)}.md"
    for name in plan.meta["registry"]["names"]:
        entry = registry.get(name)
        if entry is None:
            return f"{name} is not in {layout.registry_yaml}"
        if entry.get("doc") != doc:
            return f"{name} is registered from {entry.get('doc')!r}, not {doc}"
        if entry.get("plan_sha256") != plan_sha(plan):
            return (f"{name} was registered from another version of the plan (plan_sha256 "
                    f"{entry.get('plan_sha256')!r}, the plan is {plan_sha(plan)!r}): re-run dev")
        got = {k: entry.get(k) for k in ("rule", "module")}
        got["options"] = entry.get("options") or {}
        if got != {"rule": expected["rule"], "module": expected["module"], "options": expected["options"] or {}}:
            return f"{name}'s registry entry differs from what the plan renders: re-run dev"
    return ""


def _cases_problem(plan: Plan, layout: Layout) -> str:
    files = planned_files(plan, layout)
    rendered = render_cases(plan, layout)
    for rel in (files.ut_cases, files.st_cases):
        target = layout.path(rel)
        if not target.is_file():
            return f"{rel} is missing"
        if target.read_text(encoding="utf-8") != rendered[rel]:
            return f"{rel} differs from what the plan renders: re-run dev"
    return ""


def plan_truth(plan: Plan, layout: Layout, registry: Optional[Dict[str, Dict[str, Any]]] = None) -> PlanTruth:
    """The tree's verdict on one plan."""
    registry = _registry(layout) if registry is None else registry
    rel = str(Path(plan.path).relative_to(layout.root)) if plan.path and Path(plan.path).is_absolute() \
        else str(plan.path)
    state = plan_state(plan)
    if state != "confirmed":
        why = "draft: not confirmed" if state == "draft" else "stale: edited after confirmation; re-confirm"
        returned = plan.meta.get("returned") or {}
        if state == "draft" and returned:
            why = f"draft: returned at {returned.get('at')}: {returned.get('reason')}"
        registered = all(n in registry for n in plan.meta.get("registry", {}).get("names") or [plan.op])
        return PlanTruth(rel, plan.op, state, registered, False, False, why)
    try:
        entry = _entry_problem(plan, layout, registry)
        cases = _cases_problem(plan, layout)
    except (PlanError, KeyError) as exc:
        return PlanTruth(rel, plan.op, state, False, False, False, f"cannot render: {exc}")
    return PlanTruth(rel, plan.op, state, not entry, not cases, not (entry or cases), entry or cases)


def plan_truths(layout: Layout) -> List[Any]:
    """Every plan's :class:`PlanTruth` (or ``(path, error)`` for a plan that does not parse)."""
    registry = _registry(layout)
    out: List[Any] = []
    for path in plan_paths(layout):
        try:
            plan = load_plan(path)
        except PlanError as exc:
            out.append((str(path.relative_to(layout.root)), str(exc)))
            continue
        out.append(plan_truth(plan, layout, registry))
    return out


def _orphans(layout: Layout, registry: Dict[str, Dict[str, Any]], truths: List[Any]) -> List[Finding]:
    """Registry entries and case files of the pipeline that no confirmed, green plan stands behind."""
    by_plan = {t.plan: t for t in truths if isinstance(t, PlanTruth)}
    found = []
    for name, entry in sorted(registry.items()):
        doc = str((entry or {}).get("doc") or "")
        if not doc.startswith(f"{layout.plans_dir}/"):
            continue
        truth = by_plan.get(doc)
        if truth is None:
            found.append(Finding(layout.registry_yaml, None, _RULE, f"{name}: its plan {doc} does not exist"))
        elif truth.state != "confirmed":
            found.append(Finding(layout.registry_yaml, None, _RULE,
                                 f"{name}: registered from {doc}, which is {truth.reason}"))
    slugs = {slug_of(t.op) for t in by_plan.values() if t.state == "confirmed"}
    for folder in (layout.ut_dir, layout.st_dir):
        for case in sorted(layout.path(f"{folder}/cases").glob("*.yaml")):
            if case.stem not in slugs:
                found.append(Finding(str(case.relative_to(layout.root)), None, _RULE,
                                     f"case file without a confirmed plan ({layout.plans_dir}/{case.stem}.md)"))
    return found


def check_plans(layout: Layout) -> List[Finding]:
    """The gate's findings: confirmed plans that are not green, and pipeline files without a confirmed plan."""
    registry = _registry(layout)
    truths = plan_truths(layout)
    found = []
    for t in truths:
        if not isinstance(t, PlanTruth):
            found.append(Finding(t[0], None, _RULE, f"plan does not parse: {t[1]}"))
        elif t.state == "confirmed" and not t.green:
            found.append(Finding(t.plan, None, _RULE, f"confirmed but not green: {t.reason}"))
    return found + _orphans(layout, registry, truths)
