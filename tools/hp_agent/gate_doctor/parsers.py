# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parse gate-stage logs into findings: pylint, lizard, codespell, pytest, stage-failed markers."""
from __future__ import annotations

import dataclasses
import re

PYLINT_RE = re.compile(r"^(?P<file>[\w./-]+\.py):(?P<line>\d+):(?:\d+:)?\s*\[(?P<code>[CRWEFI]\d{4})"
                       r"\((?P<name>[\w-]+)\),\s*(?P<obj>[^\]]*)\]\s*(?P<msg>.*)$")
LIZARD_RE = re.compile(r"^(?P<file>[\w./-]+):(?P<line>\d+): warning: (?P<func>\S+) has (?P<nloc>\d+) NLOC, "
                       r"(?P<ccn>\d+) CCN, (?P<tokens>\d+) token, (?P<params>\d+) PARAM, (?P<length>\d+) length")
CODESPELL_RE = re.compile(r"^(?P<file>[\w./-]+):(?P<line>\d+): (?P<word>\S+) ==> (?P<fix>.+)$")
PYTEST_RE = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<node>\S+?)(?: - (?P<msg>.*))?$")
PYTEST_LOC_RE = re.compile(r"^(?P<file>[\w./-]+\.py):(?P<line>\d+): (?P<exc>\w+(?:Error|Exception|Exit|Failed)\w*)")
STAGE_FAILED_RE = re.compile(r"(?i)^\s*(?:#+\s*)?stage\s+['\"]?(?P<stage>[\w .:/-]+?)['\"]?\s+"
                             r"(?:failed|失败)\b(?P<rest>.*)$")
SCRIPT_EXIT_RE = re.compile(r"^ERROR: script returned exit code (?P<code>\d+)")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_JENKINS_PREFIX_RE = re.compile(r"^(?:\[\d{4}-\d\d-\d\dT[\d:.]+Z\]\s*|\d\d:\d\d:\d\d\s+)")


@dataclasses.dataclass
class Finding:
    """One failure: which tool, where (file, line), which rule, the message and the test node if any."""

    tool: str
    rule: str
    message: str
    file: str | None = None
    line: int | None = None
    test: str | None = None
    stage: str | None = None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return dataclasses.asdict(self)

    def key(self) -> str:
        """Identity across builds (test node, else file:line:rule)."""
        return self.test or f"{self.file}:{self.line}:{self.rule}"


def _clean(line: str) -> str:
    return _JENKINS_PREFIX_RE.sub("", ANSI_RE.sub("", line.rstrip("\r")))


def _pylint(line: str) -> Finding | None:
    m = PYLINT_RE.match(line)
    if not m:
        return None
    return Finding("pylint", f"{m['code']}({m['name']})", m["msg"], m["file"], int(m["line"]))


def _lizard(line: str) -> Finding | None:
    m = LIZARD_RE.match(line)
    if not m:
        return None
    msg = f"{m['func']} has CCN {m['ccn']}, {m['nloc']} NLOC, {m['params']} params, length {m['length']}"
    return Finding("lizard", "lizard-ccn", msg, m["file"], int(m["line"]))


def _codespell(line: str) -> Finding | None:
    m = CODESPELL_RE.match(line)
    if not m:
        return None
    return Finding("codespell", "codespell", f"{m['word']} ==> {m['fix']}", m["file"], int(m["line"]))


def _pytest(line: str) -> Finding | None:
    m = PYTEST_RE.match(line)
    if not m or "::" not in m["node"] and not m["node"].endswith(".py"):
        return None
    node = m["node"]
    return Finding("pytest", "test-failed" if m["kind"] == "FAILED" else "test-error", m["msg"] or "",
                   node.split("::")[0], None, node)


def _marker(line: str) -> Finding | None:
    m = STAGE_FAILED_RE.match(line)
    if m:
        return Finding("stage", "stage-failed", f"stage {m['stage'].strip()} failed{m['rest']}".strip(),
                       stage=m["stage"].strip())
    m = SCRIPT_EXIT_RE.match(line)
    if m:
        return Finding("stage", "script-exit", f"script returned exit code {m['code']}")
    return None


_PARSERS = (_pylint, _lizard, _codespell, _pytest, _marker)


def parse_log(text: str, stage: str | None = None) -> list[Finding]:
    """All findings in ``text``; pytest failures get their ``file:line`` from the traceback when present."""
    findings: list[Finding] = []
    locations: dict[str, int] = {}
    for raw in text.splitlines():
        line = _clean(raw)
        loc = PYTEST_LOC_RE.match(line)
        if loc:
            locations.setdefault(loc["file"], int(loc["line"]))
        for parser in _PARSERS:
            found = parser(line)
            if found:
                found.stage = found.stage or stage
                findings.append(found)
                break
    for found in findings:
        if found.tool == "pytest" and found.file in locations:
            found.line = locations[found.file]
    return _dedupe(findings)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.tool, f.key(), f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
