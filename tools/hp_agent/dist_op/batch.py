# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Batch mode: many ops at once, one decision per batch.

* :func:`unsupported_ops` reads ``docs/op_coverage.md`` (``make coverage``) and lists the torch names of
  the OpInfo ops with no distributed rule (``--family``: the OpInfo namespace, ``torch`` for top-level ops,
  ``nn.functional``, ``special``, ``linalg``, ``fft``; ``--limit``);
* :func:`review_rows` summarises plans (op, status, path and rule, accepted strategies, conditions, open
  ``[TBD]``) so a reviewer decides a whole batch in one pass;
* :func:`confirm_batch` applies the reviewer's decisions (``KEY=VALUE``) to every plan of a batch file and
  confirms each (who, when and the sha256 recorded per plan);
* :func:`dev_batch` scaffolds every plan, then runs all their UT in one pytest process and all their ST in
  one (one gloo worker pool), and reports per op: machine time, human actions, result.
"""
from __future__ import annotations

import re
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, PlanError, confirm_plan, find_tbd, load_plan, plan_state, return_to_draft, \
    set_field, slug_of
from hp_agent.dist_op.scaffold import remove_files, scaffold

__all__ = ["unsupported_ops", "torch_name", "review_rows", "confirm_batch", "dev_batch", "BatchRow", "read_batch"]

_ROW = re.compile(r"^\| `([^`]+)` \| (.*)$")


def torch_name(opinfo: str) -> Optional[str]:
    """The torch callable an OpInfo name stands for (``nn.functional.x`` -> ``torch.nn.functional.x``), or
    None for variants, private ops and names torch does not have."""
    import torch
    if "." in opinfo and opinfo.split(".")[0] not in ("nn", "special", "linalg", "fft"):
        return None  # a variant (max.reduction_with_dim): its base op has its own row
    if opinfo.startswith("_"):
        return None
    obj: Any = torch
    for part in opinfo.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return f"torch.{opinfo}" if callable(obj) else None


_DISPATCH = re.compile(r"no distributed rule for ([A-Za-z_][\w.:]*?)\.? Register")
_ATEN = re.compile(r"^torch\._ops\.aten\.(?:aten::(\w+)(?:\.(\w+))?|pybind11\w*?_use_cxx11_abi_\d+\.(\w+))$")


def _special_name(opinfo: str, name: str) -> Optional[str]:
    """Names the dispatcher reports for what is not a plain function: a Tensor property's getter
    (``getset_descriptor.__get__`` for OpInfo ``H`` -> ``Tensor.H``), an aten overload
    (``torch._ops.aten.aten::slice.Tensor`` -> ``torch.ops.aten.slice.Tensor``; no overload ->
    ``.default``) or overload packet (``torch._ops.aten.pybind11_..._X`` -> ``torch.ops.aten.X``), and a
    private top-level torch function that OpInfo tests under its own name (``torch._unsafe_masked_index``)."""
    import torch
    if name == "getset_descriptor.__get__":
        return f"Tensor.{opinfo}" if isinstance(getattr(torch.Tensor, opinfo, None), type(torch.Tensor.H)) else None
    m = _ATEN.match(name)
    if m is not None:
        op, overload = (m.group(1), m.group(2) or "default") if m.group(1) else (m.group(3), None)
        if not hasattr(torch.ops.aten, op):
            return None
        return f"torch.ops.aten.{op}" + (f".{overload}" if overload else "")
    if name == f"torch.{opinfo}" and opinfo.startswith("_") and "." not in opinfo and callable(
            getattr(torch, opinfo, None)):
        return name
    return None


def _dispatch_name(opinfo: str, problem: str) -> Optional[str]:
    """For an OpInfo name :func:`torch_name` cannot map (a variant, a Tensor method): the base op of a
    variant (``nn.functional.interpolate.area`` -> ``torch.nn.functional.interpolate``), else the name the
    dispatcher reported in the coverage row (:func:`_reported_name`)."""
    if "." in opinfo:
        base = torch_name(opinfo.rsplit(".", 1)[0])
        if base is not None:
            return base
    return _reported_name(opinfo, problem)


def _reported_name(opinfo: str, problem: str) -> Optional[str]:
    """The name the dispatcher reported in the coverage row (``TensorBase.bool`` -> ``Tensor.bool``, and the
    names of :func:`_special_name`); None for other private and ``torch._C`` names."""
    m = _DISPATCH.search(problem)
    if m is None:
        # an overload packet's long pybind name is cut off in the report: the OpInfo name is the aten op
        if "no distributed rule for torch._ops.aten.pybind11" in problem:
            return _special_name(opinfo, f"torch._ops.aten.pybind11_use_cxx11_abi_1.{opinfo}")
        return None
    name = m.group(1)
    special = _special_name(opinfo, name)
    if special is not None:
        return special
    if name.startswith("TensorBase."):
        name = "Tensor." + name[len("TensorBase."):]
    method = name.split(".", 1)[1] if name.startswith("Tensor.") else ""
    if method and (not method.startswith("_") or (method.startswith("__") and method.endswith("__"))):
        return name  # a public method or an operator dunder (Tensor.__rmod__)
    if name.startswith("torch.") and ":" not in name and not any(part.startswith("_") for part in name.split(".")):
        return name
    return None


def _resolves(name: str) -> Any:
    """The object a torch name resolves to (None when it does not)."""
    import torch
    obj: Any = torch if name.startswith("torch.") else torch.Tensor
    for part in name.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _names_for(opinfo: str, problem: str) -> List[str]:
    """Torch names to plan for one unsupported OpInfo op: its own callable, and the function the dispatcher
    reported when that is another object (``nn.functional.max_pool2d`` runs
    ``max_pool2d_with_indices`` when indices are asked for: both need an entry)."""
    own = torch_name(opinfo) or _dispatch_name(opinfo, problem)
    reported = _reported_name(opinfo, problem)
    out = [n for n in (own, reported) if n is not None]
    if len(out) == 2 and (out[0] == out[1] or _resolves(out[0]) is _resolves(out[1])):
        out = out[:1]
    return out


def _family(opinfo: str) -> str:
    head = opinfo.split(".")[0]
    if opinfo.startswith("nn.functional."):
        return "nn.functional"
    return head if head in ("special", "linalg", "fft") else "torch"


def unsupported_ops(coverage: Path, family: Optional[str] = None, limit: Optional[int] = None) -> List[str]:
    """Torch names of the ops ``coverage`` marks unsupported (no distributed rule), in file order."""
    if not coverage.is_file():
        raise PlanError(f"{coverage}: no coverage report (run make coverage)")
    names = []
    for line in coverage.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split(" | ")]
        if len(cells) < 4 or cells[3] != "unsupported":
            continue
        if family is not None and _family(m.group(1)) != family:
            continue
        for name in _names_for(m.group(1), cells[-1]):
            if name not in names and (limit is None or len(names) < limit):
                names.append(name)
        if limit is not None and len(names) >= limit:
            break
    return names


def read_batch(path: Path) -> List[Path]:
    """Plan paths listed in a batch file (one a line; ``#`` comments and blank lines ignored)."""
    if not path.is_file():
        raise PlanError(f"{path}: no such batch file (one plan path a line)")
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            plan = Path(line) if Path(line).is_absolute() else path.parent / line
            if not plan.is_file():
                plan = Path.cwd() / line
            if not plan.is_file():
                raise PlanError(f"{path}: plan {line!r} does not exist")
            out.append(plan)
    if not out:
        raise PlanError(f"{path}: the batch lists no plan")
    return out


def review_rows(plans: Sequence[Plan]) -> List[Dict[str, Any]]:
    """One summary row per plan: what a reviewer decides on."""
    rows = []
    for plan in plans:
        m = plan.meta
        accepted = m.get("accepted") or []
        strategies = sorted({",".join(a["input"]) + "->" + ",".join(a["output"]) for a in accepted})
        conditions = [line[len("- generalised: "):] for line in plan.body.splitlines()
                      if line.startswith("- generalised: ")]
        rows.append({"op": plan.op, "status": plan_state(plan), "path": m.get("path"),
                     "rule": (m.get("rule") or {}).get("class"), "strategies": strategies,
                     "conditions": conditions, "tbd": find_tbd(plan),
                     "differentiable": (m.get("derivation") or {}).get("differentiable", True)})
    return rows


def confirm_batch(plans: Sequence[Path], who: str, decisions: Sequence[str]) -> List[Dict[str, Any]]:
    """Apply ``decisions`` (``KEY=VALUE``) to every plan, then confirm each; a plan with ``[TBD]`` left is
    refused by name (the others are still confirmed)."""
    out = []
    for path in plans:
        plan = load_plan(path)
        for assignment in decisions:
            set_field(plan, assignment)
        try:
            record = confirm_plan(plan, who)
        except PlanError as exc:
            plan.save(path)
            out.append({"plan": str(path), "op": plan.op, "confirmed": False, "error": str(exc)})
            continue
        plan.save(path)
        out.append({"plan": str(path), "op": plan.op, "confirmed": True, **record})
    return out


@dataclass
class BatchRow:
    """One op of a ``dev --batch`` run."""

    op: str
    ut: str
    st: str
    seconds: float
    human_actions: str
    mindspore: str = "out of scope"

    @property
    def green(self) -> bool:
        """UT and ST passed (and the MindSpore frontend, when in scope)."""
        return self.ut == self.st == "passed" and self.mindspore in ("passed", "out of scope")

    def to_dict(self) -> Dict[str, Any]:
        """JSON form."""
        return {"op": self.op, "ut": self.ut, "st": self.st, "mindspore": self.mindspore,
                "seconds": round(self.seconds, 1), "human_actions": self.human_actions, "green": self.green}


def _junit(path: Path) -> Dict[str, tuple]:
    """pytest node (``test_x[op]``) -> (outcome, seconds) from a JUnit XML report."""
    out: Dict[str, tuple] = {}
    if not path.is_file():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped (not allowed)"
        out[case.get("name", "")] = (outcome, float(case.get("time", 0.0)))
    return out


def _pytest(layout: Layout, nodes: List[str], report: Path, timeout: float) -> Dict[str, tuple]:
    argv = [layout.interpreter, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            f"--junitxml={report}", *nodes]
    try:
        subprocess.run(argv, cwd=layout.root, env=layout.test_env(), capture_output=True, text=True,
                       timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pass  # the nodes without a result are reported as not run
    return _junit(report)


def _actions(plan: Plan) -> str:
    """Human actions recorded for the plan: the confirmation (and the decisions before it)."""
    conf = plan.meta.get("confirmation") or {}
    return f"confirmed by {conf.get('by', '?')}" if conf else "not confirmed"


def _invalid_entries(plans: Sequence[Plan]) -> Dict[str, str]:
    """Plans whose registry entry cannot build its rule (bad options): not scaffolded — one broken entry
    in the registry file would stop the dispatcher installing the entries after it."""
    from hyper_parallel.core.ops.registry import resolve_rule_class
    from hp_agent.dist_op.scaffold import planned_entry
    broken = {}
    for plan in plans:
        entry = planned_entry(plan)
        try:
            cls = resolve_rule_class(entry["module"], entry["rule"], plan.op)
            cls(plan.op, **(entry.get("options") or {}))
        except Exception as exc:  # pylint: disable=broad-except  # any failure to build the rule: reported per op
            broken[plan.op] = str(exc).splitlines()[0][:160]
    return broken


def _load_confirmed(plans: Sequence[Path]) -> list:
    """Load every plan; refuse the batch if one is not confirmed yet."""
    loaded = []
    for path in plans:
        plan = load_plan(path)
        if plan_state(plan) != "confirmed":
            raise PlanError(f"{path}: plan is {plan_state(plan)}; confirm it first (confirm --batch)")
        loaded.append(plan)
    return loaded


def _batch_rows(loaded, broken, ut, st, ms, scaffold_s) -> List[BatchRow]:
    """One report row per op: invalid entries first, then each developed op's UT/ST/MindSpore outcome."""
    rows = [BatchRow(op, f"invalid registry entry: {why}", "not run", 0.0, "not written") for op, why in broken.items()]
    for plan in loaded:
        slug = slug_of(plan.op)
        u = ut.get(f"test_plan_cases[{slug}]", ("not run", 0.0))
        s = st.get(f"test_plan_parity[{slug}]", ("not run", 0.0))
        m = ms.get(plan.op)
        rows.append(BatchRow(plan.op, u[0], s[0], scaffold_s + u[1] + s[1] + (m.seconds if m else 0.0),
                             _actions(plan), "out of scope" if m is None else
                             "passed" if m.ok else f"failed: {m.detail[:300]}"))
    return rows


def dev_batch(plans: Sequence[Path], layout: Layout, progress=None) -> List[BatchRow]:
    """Scaffold every confirmed plan, then one pytest process for all UT and one for all ST; a plan that does not
    go green is withdrawn (its files removed, the plan back to draft with the reason)."""
    every = _load_confirmed(plans)
    start = time.monotonic()
    broken = _invalid_entries(every)
    loaded = [plan for plan in every if plan.op not in broken]
    files = [scaffold(plan, layout) for plan in loaded]
    scaffold_s = (time.monotonic() - start) / max(len(loaded), 1)
    work = layout.path(".gate")
    work.mkdir(exist_ok=True)
    report = progress or (lambda _msg: None)
    report(f"UT of {len(loaded)} op(s) in one pytest process")
    ut = _pytest(layout, [f.ut_test for f in files], work / "dist-op-batch-ut.xml", 600)
    report(f"ST of {len(loaded)} op(s) in one pytest process (one gloo pool)")
    st = _pytest(layout, [f.st_test for f in files], work / "dist-op-batch-st.xml", 1800)
    from hp_agent.dist_op.mindspore_frontend import in_scope, mindspore_step
    if any(in_scope(p) for p in loaded):
        report("MindSpore frontends: kernel check in one MindSpore process, then one 2-rank launch")
    ms = mindspore_step(loaded, layout)
    rows = _batch_rows(loaded, broken, ut, st, ms, scaffold_s)
    _withdraw_failed(every, rows, layout)  # the broken ones (never scaffolded) included
    return rows


def _withdraw_failed(plans: Sequence[Plan], rows: Sequence[BatchRow], layout: Layout) -> None:
    """A batch keeps only what went green: a failed op's registry entries and case files are removed and its
    plan returns to draft with the reason (``returned``), so nothing confirmed is left failing its tests."""
    failed = {r.op: r for r in rows if not r.green}
    for plan in plans:
        row = failed.get(plan.op)
        if row is None:
            continue
        remove_files(plan, layout)
        return_to_draft(plan, f"dev --batch failed: UT {row.ut[:200]}; ST {row.st[:200]}; MindSpore "
                              f"{row.mindspore[:200]}")
        plan.save()
