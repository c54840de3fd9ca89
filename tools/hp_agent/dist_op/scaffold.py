# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Deterministic files from a confirmed plan: data only (no Python per op).

* the registry entries (``generated.yaml``): path A names the reused rule with its options; paths B and C
  name a class of :mod:`hyper_parallel.core.ops.rules.planned` parameterised by the plan (the layout
  argument's position and default, linearity, the shape rule, the expand and its scalars);
* the op's cases as data, one YAML file per tier (``<ut_dir>/cases/<op>.yaml``, ``<st_dir>/cases/<op>.yaml``);
* the one shared test module per tier that parametrizes over those files (written when missing or
  different: it is the same for every op).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

import yaml

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import SAFE_LOADER, Plan, PlanError, dump_yaml, safe_dump, slug_of
from hp_agent.dist_op.render import render

__all__ = ["Scaffold", "scaffold", "planned_files", "planned_entry", "render_files", "render_cases", "remove_files",
           "plan_sha", "PLANNED", "PLANNED_MODULE", "UT_TEST", "ST_TEST", "SHA_LEN"]

PLANNED_MODULE = "hyper_parallel.core.ops.rules.planned"
# plan template -> the shared class that executes it (paths B and C)
PLANNED = {"dim_local": "DimLocalRule", "coupled_dim": "CoupledDimRule", "scan": "CombineScanRule"}
UT_TEST = "test_generated_rules.py"
ST_TEST = "test_generated_parity.py"
#: hex digits of the plan's confirmation sha256 recorded in its registry entries and case files
SHA_LEN = 16
_CASES_HEADER = ("# Cases of {op}, written by `hp-agent dist-op dev` from the confirmed plan {plan}\n"
                 "# (read by {test}): change the plan and re-run dev, do not edit by hand.\n")


@dataclass
class Scaffold:
    """The files of one plan (relative paths) and what was written."""

    ut_cases: str
    st_cases: str
    ut_file: str
    st_file: str
    registry_file: str
    written: List[str] = field(default_factory=list)

    @property
    def generated(self) -> List[str]:
        """Every file the pipeline owns for this plan."""
        return [self.registry_file, self.ut_cases, self.st_cases, self.ut_file, self.st_file]

    @property
    def ut_test(self) -> str:
        """pytest node id of the plan's UT."""
        return f"{self.ut_file}::test_plan_cases[{self._op}]"

    @property
    def st_test(self) -> str:
        """pytest node id of the plan's ST."""
        return f"{self.st_file}::test_plan_parity[{self._op}]"

    @property
    def _op(self) -> str:
        return self.ut_cases.rsplit("/", 1)[-1][:-len(".yaml")]


def planned_files(plan: Plan, layout: Layout) -> Scaffold:
    """Where the plan's files go."""
    slug = slug_of(plan.op)
    return Scaffold(f"{layout.ut_dir}/cases/{slug}.yaml", f"{layout.st_dir}/cases/{slug}.yaml",
                    f"{layout.ut_dir}/{UT_TEST}", f"{layout.st_dir}/{ST_TEST}", layout.registry_yaml)


def _check_plan(plan: Plan) -> None:
    path = str(plan.meta.get("path"))
    if path not in ("A", "B", "C"):
        raise PlanError(f"{plan.path}: path must be A, B or C, got {path!r}")
    rule = plan.meta.get("rule") or {}
    if path in ("B", "C") and rule.get("template") not in PLANNED:
        raise PlanError(f"{plan.path}: path {path} needs rule.template in {sorted(PLANNED)}, got "
                        f"{rule.get('template')!r}")
    if path == "A" and not (rule.get("module") and rule.get("class")):
        raise PlanError(f"{plan.path}: path A needs rule.module and rule.class of the reused rule")
    ms = (plan.meta.get("frontends") or {}).get("mindspore") or {}
    if ms.get("in_scope") not in (True, False):
        raise PlanError(f"{plan.path}: frontends.mindspore.in_scope must be true or false")


def _dim_options(m: Dict[str, Any]) -> Dict[str, Any]:
    deriv = m.get("derivation") or {}
    return {"dim_param": deriv.get("dim_param") or "dim", "dim_position": m.get("dim_position"),
            "dim_default": m.get("dim_default")}


def _scalar(m: Dict[str, Any], name: str) -> Dict[str, Any]:
    param = (m.get("expand_params") or {}).get(name)
    if not param:
        raise PlanError(f"{m.get('op')}: expand_params.{name} (position and default) is missing from the plan")
    return {f"{name}_position": param["position"], f"{name}_default": param["default"]}


def planned_entry(plan: Plan) -> Dict[str, Any]:
    """(rule, module, options) of the plan's registry entries: the reused rule (path A) or the shared class
    of :mod:`hyper_parallel.core.ops.rules.planned` with the plan's parameters (paths B and C)."""
    m = plan.meta
    template = (m.get("rule") or {}).get("template")
    if not template:
        return {"rule": m["rule"]["class"], "module": m["rule"]["module"], "options": dict(m.get("options") or {})}
    deriv = m.get("derivation") or {}
    options = {**dict(m.get("options") or {}), **_dim_options(m)}
    if template == "dim_local":
        options.update(linear=bool(deriv.get("linear")), shape=deriv.get("shape_rule") or "same")
        if options["shape"] == "minus_n":
            options.update(_scalar(m, "n"))
    elif template == "coupled_dim":
        if deriv.get("expand") == "pnorm":
            options.update(expand="pnorm", **_scalar(m, "p"), **_scalar(m, "eps"))
    else:
        options.update(combine=deriv.get("scan_combine"), linear=bool(deriv.get("linear")))
    return {"rule": PLANNED[template], "module": PLANNED_MODULE, "options": options}


def plan_sha(plan: Plan) -> str:
    """The first :data:`SHA_LEN` hex digits of the plan's confirmation sha256 ('' when not confirmed): the
    registry entries and case files carry it, so a later change of the plan shows as a mismatch."""
    return str((plan.meta.get("confirmation") or {}).get("sha256") or "")[:SHA_LEN]


def _read_registry(layout: Layout) -> Dict[str, Dict[str, Any]]:
    target = layout.path(layout.registry_yaml)
    if not target.is_file():
        return {}
    return yaml.load(target.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}


def _registry_entries(plan: Plan, layout: Layout) -> Dict[str, Dict[str, Any]]:
    entries = _read_registry(layout)
    entry = planned_entry(plan)
    for name in plan.meta["registry"]["names"]:
        entries[name] = {**entry, "doc": f"{layout.plans_dir}/{slug_of(plan.op)}.md", "plan_sha256": plan_sha(plan)}
    return dict(sorted(entries.items()))


def _signature_positions(plan: Plan) -> Dict[str, Any]:
    iface = plan.meta["interface"][plan.op]
    positions, defaults = {}, {}
    for i, p in enumerate(iface["params"]):
        if p.get("tensor", i == 0) or p.get("keyword_only"):
            continue  # the first tensor; a leading scalar (polygamma's n) keeps its position 0
        positions[p["name"]] = i
        if p.get("has_default"):
            defaults[p["name"]] = p.get("default")
    return {"positions": positions, "defaults": defaults}


def _flow(value: Any) -> str:
    return safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _cases_text(plan: Plan, layout: Layout, test: str, body: Dict[str, Any]) -> str:
    """The case file: scalars and mappings as in the plan, every case on one line (flow style)."""
    plan_path = f"{layout.plans_dir}/{slug_of(plan.op)}.md"
    lines = [_CASES_HEADER.format(op=plan.op, plan=plan_path, test=test).rstrip("\n"),
             dump_yaml({"op": plan.op, "plan": plan_path, "plan_sha256": plan_sha(plan),
                        "names": list(plan.meta["registry"]["names"])}).rstrip()]
    for key, value in body.items():
        if isinstance(value, list):
            lines.append(f"{key}:" + ("" if value else " []"))
            lines.extend(f"- {_flow(item)}" for item in value)
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def render_cases(plan: Plan, layout: Layout) -> Dict[str, str]:
    """The plan's two case files (UT, ST) as ``dev`` writes them: relative path -> text. Pure."""
    _check_plan(plan)
    files = planned_files(plan, layout)
    out = {files.ut_cases: _cases_text(plan, layout, files.ut_file, {
        **_signature_positions(plan), "accepted": plan.meta.get("accepted") or [],
        "rejected": plan.meta.get("rejected") or []}),
        files.st_cases: _cases_text(plan, layout, files.st_file, {"cases": plan.meta.get("st_cases") or []})}
    return {rel: text.rstrip("\n") + "\n" for rel, text in out.items()}


def render_files(plan: Plan, layout: Layout) -> Dict[str, str]:
    """Every file of ``plan`` as ``dev`` writes it: relative path -> text (the registry file with this plan's
    entries merged into the current one). Pure: reads the registry, writes nothing."""
    files = planned_files(plan, layout)
    out: Dict[str, str] = render_cases(plan, layout)
    entries = _registry_entries(plan, layout)
    out[files.registry_file] = render("registry.yaml.j2", entries=list(entries.items()))
    out[files.ut_file] = render("test_ut.py.j2")
    out[files.st_file] = render("test_st.py.j2")
    for test_dir in (layout.ut_dir, layout.st_dir):
        out[f"{test_dir}/__init__.py"] = _init_text("Tests generated by hp-agent dist-op dev from confirmed plans.")
    return {rel: text.rstrip("\n") + "\n" for rel, text in out.items()}


def scaffold(plan: Plan, layout: Layout, write: bool = True) -> Scaffold:
    """Render every file of ``plan`` (and write them unless ``write`` is False)."""
    files = planned_files(plan, layout)
    out = render_files(plan, layout)
    if write:
        for rel, text in out.items():
            target = layout.path(rel)
            if target.exists() and (rel.endswith("__init__.py") or target.read_text(encoding="utf-8") == text):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            files.written.append(rel)
    return files


def _init_text(doc: str) -> str:
    return ("# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n"
            "# SPDX-License-Identifier: Apache-2.0\n" f'"""{doc}"""\n')


def remove_files(plan: Plan, layout: Layout) -> List[str]:
    """Undo ``dev`` for a plan that did not go green: drop its names from the registry file and delete its
    case files (the shared test modules stay). Returns the relative paths changed."""
    files = planned_files(plan, layout)
    changed = []
    entries = _read_registry(layout)
    names = [n for n in plan.meta["registry"]["names"] if n in entries]
    if names:
        for name in names:
            del entries[name]
        layout.path(files.registry_file).write_text(
            render("registry.yaml.j2", entries=sorted(entries.items())).rstrip("\n") + "\n", encoding="utf-8")
        changed.append(files.registry_file)
    for rel in (files.ut_cases, files.st_cases):
        if layout.path(rel).is_file():
            layout.path(rel).unlink()
            changed.append(rel)
    return changed
