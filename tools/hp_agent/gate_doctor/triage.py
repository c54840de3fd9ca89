# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Flake triage: PR-induced vs unrelated, sticky vs random, and the ordered fix list.

A failure is *PR-induced* when the PR changed build inputs, touched the failing file, or the failing test
reaches changed code through imports — unless the same test also failed on a recent base-branch build.
An unrelated failure is *sticky* when it failed in two or more builds of the same head, else *random*.
Decisions: PR-induced → fix (ordered list for the assistant); unrelated-random → retest (within budget);
unrelated-sticky → a maintainer-facing comment.  Skips, xfail markers and loosened tolerances are never
proposed as fixes.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

from hp_agent.findings import Finding

BUILD_INPUTS = ("pyproject.toml", "setup.py", "setup.cfg", "Makefile", "requirements", "conftest.py",
                "ci/", ".ci/", "csrc/", "Jenkinsfile")
FORBIDDEN_FIX_RE = re.compile(r"(?i)(pytest\.mark\.(skip|xfail)|\bskip(if)?\b|\bxfail\b|atol|rtol|tolerance|"
                              r"pylint:\s*disable|noqa|# type:\s*ignore)")
TOOL_ORDER = {"codespell": 0, "pylint": 1, "lizard": 2, "pytest": 3, "stage": 4}
_HINTS = {
    "pylint": "fix the code so that {rule} no longer fires at this line",
    "lizard": "split the function into smaller functions to bring its complexity under the limit",
    "codespell": "correct the spelling ({message})",
    "pytest": "find the root cause of the failure and fix the code (or the test's wrong expectation)",
    "stage": "read the stage log above the marker and fix what it reports",
}


def is_build_input(path: str) -> bool:
    """True when ``path`` feeds the build itself (packaging, CI scripts, C++ sources, conftest)."""
    return any(path == p or path.startswith(p) or PurePosixPath(path).name.startswith(p.rstrip("/"))
               for p in BUILD_INPUTS)


def _module_of(path: str) -> str | None:
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return None
    parts = list(p.with_suffix("").parts)
    if parts and parts[0] == "tools":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def _imports(root: Path, rel: str) -> set[str]:
    try:
        tree = ast.parse((root / rel).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _path_of(root: Path, module: str) -> str | None:
    base = module.replace(".", "/")
    for cand in (f"{base}.py", f"{base}/__init__.py", f"tools/{base}.py", f"tools/{base}/__init__.py"):
        if (root / cand).is_file():
            return cand
    return None


def reaches_changed(root: Path, test_file: str, changed: list[str], depth: int = 3) -> bool:
    """True when ``test_file`` imports (transitively, up to ``depth`` hops) a module changed by the PR."""
    changed_mods = {m for m in (_module_of(c) for c in changed) if m}
    frontier, seen = {test_file}, {test_file}
    for _ in range(depth):
        nxt: set[str] = set()
        for rel in frontier:
            for name in _imports(root, rel):
                if any(name == m or name.startswith(m + ".") or m.startswith(name + ".") for m in changed_mods):
                    return True
                path = _path_of(root, name)
                if path and path not in seen:
                    seen.add(path)
                    nxt.add(path)
        frontier = nxt
    return False


def classify(finding: Finding, ctx: dict) -> dict:
    """Triage one finding; ``ctx`` has root, changed, master_failures, history (list of key sets)."""
    changed: list[str] = ctx["changed"]
    key = finding.key()
    reasons = []
    if any(is_build_input(c) for c in changed):
        reasons.append("the PR changes build inputs")
    if finding.file and finding.file in changed:
        reasons.append(f"the PR changes {finding.file}")
    if finding.tool == "pytest" and finding.file and reaches_changed(ctx["root"], finding.file, changed):
        reasons.append("the test imports code the PR changes")
    on_master = key in ctx["master_failures"]
    if finding.tool in ("pylint", "lizard", "codespell") and not on_master:
        reasons.append(f"{finding.tool} findings are deterministic")
    pr_induced = bool(reasons) and not on_master
    fails = sum(1 for keys in ctx["history"] if key in keys)
    sticky = fails >= 2
    decision = "fix" if pr_induced else ("report" if sticky else "retest")
    return {"key": key, "finding": finding.to_dict(), "pr_induced": pr_induced, "sticky": sticky,
            "failed_builds": fails, "failed_on_master": on_master, "reasons": reasons, "decision": decision}


def fix_list(items: list[dict]) -> list[dict]:
    """Ordered (by tool, file, line) fix instructions for PR-induced findings; never a forbidden fix."""
    fixes = []
    for item in items:
        if item["decision"] != "fix":
            continue
        f = item["finding"]
        hint = _HINTS.get(f["tool"], _HINTS["stage"]).format(**f)
        if FORBIDDEN_FIX_RE.search(hint):
            raise AssertionError(f"refusing to propose a forbidden fix: {hint!r}")
        fixes.append({"file": f["file"], "line": f["line"], "rule": f["rule"], "tool": f["tool"],
                      "message": f["message"], "test": f["test"], "hint": hint})
    fixes.sort(key=lambda x: (TOOL_ORDER.get(x["tool"], 9), x["file"] or "", x["line"] or 0))
    return fixes


def triage(findings: list[Finding], ctx: dict) -> dict:
    """Triage every actionable finding; returns items, fix list and the overall decision."""
    actionable = [f for f in findings if f.tool != "stage"] or list(findings)
    items = [classify(f, ctx) for f in actionable]
    decisions = {i["decision"] for i in items}
    overall = "needs-human" if not items else next(d for d in ("fix", "report", "retest") if d in decisions)
    if items and all(i["finding"]["tool"] == "stage" for i in items) and overall != "fix":
        overall = "needs-human"
    return {"decision": overall, "items": items, "fixes": fix_list(items)}
