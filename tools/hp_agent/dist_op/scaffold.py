# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Deterministic files from a confirmed plan: the rule module (paths B/C), the registry entries, UT and ST."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, PlanError, slug_of
from hp_agent.dist_op.render import render

__all__ = ["Scaffold", "scaffold", "planned_files", "IDENTITIES"]

IDENTITIES = {"add": "0.0", "mul": "1.0", "logaddexp": "-math.inf", "maximum": "-math.inf",
              "minimum": "math.inf"}
TEMPLATES = {"scan": "rule_scan.py.j2", "coupled_dim": "rule_coupled_dim.py.j2", "dim_local": "rule_dim_local.py.j2"}


@dataclass
class Scaffold:
    """The files of one plan (relative paths) and what was written."""

    rule_file: Optional[str]
    ut_file: str
    st_file: str
    registry_file: str
    written: List[str] = field(default_factory=list)

    @property
    def generated(self) -> List[str]:
        """Every file the pipeline owns for this plan."""
        return [f for f in (self.rule_file, self.registry_file, self.ut_file, self.st_file) if f]


def _identifier(op: str) -> str:
    return slug_of(op).replace(".", "_").lower()


def planned_files(plan: Plan, layout: Layout) -> Scaffold:
    """Where the plan's files go."""
    ident = _identifier(plan.op)
    rule = plan.meta.get("rule") or {}
    rule_file = None
    if rule.get("template"):
        rule_file = f"{layout.rules_package.replace('.', '/')}/{ident}.py"
    return Scaffold(rule_file, f"{layout.ut_dir}/test_{ident}.py", f"{layout.st_dir}/test_{ident}.py",
                    layout.registry_yaml)


def _check_plan(plan: Plan) -> None:
    path = str(plan.meta.get("path"))
    if path not in ("A", "B", "C"):
        raise PlanError(f"{plan.path}: path must be A, B or C, got {path!r}")
    rule = plan.meta.get("rule") or {}
    if path in ("B", "C") and rule.get("template") not in TEMPLATES:
        raise PlanError(f"{plan.path}: path {path} needs rule.template in {sorted(TEMPLATES)}, got "
                        f"{rule.get('template')!r}")
    if path == "A" and not (rule.get("module") and rule.get("class")):
        raise PlanError(f"{plan.path}: path A needs rule.module and rule.class of the reused rule")
    ms = (plan.meta.get("frontends") or {}).get("mindspore") or {}
    if ms.get("in_scope") not in (True, False):
        raise PlanError(f"{plan.path}: frontends.mindspore.in_scope must be true or false")


def _rule_context(plan: Plan, layout: Layout) -> Dict[str, Any]:
    m = plan.meta
    deriv = m.get("derivation") or {}
    return {"names": m["registry"]["names"], "cls": m["rule"]["class"], "dim_param": deriv.get("dim_param"),
            "dim_position": m.get("dim_position"), "dim_default": repr(m.get("dim_default")),
            "linear": bool(deriv.get("linear")), "combine": deriv.get("scan_combine"),
            "identity": IDENTITIES.get(deriv.get("scan_combine") or "", "0.0"),
            "shape_rule": deriv.get("shape_rule"), "expand": deriv.get("expand"),
            "expand_params": {k: {"position": v["position"], "default": repr(v["default"])}
                              for k, v in (m.get("expand_params") or {}).items()},
            "plan_path": f"{layout.plans_dir}/{slug_of(plan.op)}.md"}


def _registry_entries(plan: Plan, layout: Layout) -> Dict[str, Dict[str, Any]]:
    target = layout.path(layout.registry_yaml)
    entries: Dict[str, Dict[str, Any]] = {}
    if target.is_file():
        entries = yaml.safe_load(target.read_text(encoding="utf-8")) or {}
    rule = plan.meta["rule"]
    for name in plan.meta["registry"]["names"]:
        entries[name] = {"rule": rule["class"], "module": rule["module"], "options": plan.meta.get("options") or {},
                         "doc": f"{layout.plans_dir}/{slug_of(plan.op)}.md"}
    return dict(sorted(entries.items()))


def _signature_positions(plan: Plan) -> Dict[str, Any]:
    iface = plan.meta["interface"][plan.op]
    positions, defaults = {}, {}
    for i, p in enumerate(iface["params"]):
        if i == 0 or p.get("tensor") or p.get("keyword_only"):
            continue
        positions[p["name"]] = i
        if p.get("has_default"):
            defaults[p["name"]] = p.get("default")
    return {"positions": positions, "defaults": defaults}


def scaffold(plan: Plan, layout: Layout, write: bool = True) -> Scaffold:
    """Render every file of ``plan`` (and write them unless ``write`` is False)."""
    _check_plan(plan)
    files = planned_files(plan, layout)
    ctx = _rule_context(plan, layout)
    out: Dict[str, str] = {}
    if files.rule_file:
        out[files.rule_file] = render(TEMPLATES[plan.meta["rule"]["template"]], **ctx)
        init = str(Path(files.rule_file).parent / "__init__.py")
        out[init] = _init_text("Rule modules generated by hp-agent dist-op dev from confirmed plans.")
    entries = _registry_entries(plan, layout)
    out[files.registry_file] = render("registry.yaml.j2", entries=list(entries.items()))
    sig = _signature_positions(plan)
    out[files.ut_file] = render("test_ut.py.j2", names=plan.meta["registry"]["names"],
                                accepted=plan.meta.get("accepted") or [], rejected=plan.meta.get("rejected") or [],
                                plan_path=ctx["plan_path"], **sig)
    out[files.st_file] = render("test_st.py.j2", names=plan.meta["registry"]["names"],
                                st_cases=plan.meta.get("st_cases") or [], plan_path=ctx["plan_path"],
                                test_name=_identifier(plan.op))
    for test_dir in (layout.ut_dir, layout.st_dir):
        out[f"{test_dir}/__init__.py"] = _init_text("Tests generated by hp-agent dist-op dev from confirmed plans.")
    if write:
        for rel, text in out.items():
            target = layout.path(rel)
            if rel.endswith("__init__.py") and target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
            files.written.append(rel)
    return files


def _init_text(doc: str) -> str:
    return ("# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n"
            "# SPDX-License-Identifier: Apache-2.0\n" f'"""{doc}"""\n')
