# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reading :class:`~hp_agent.findings.Finding` records out of tool output: the one parser set.

``hp-agent gate run`` parses each stage's output with the parser the stage names (:data:`PARSERS`);
gate-doctor reads whole Jenkins logs with :func:`parse_log`, which tries every parser on every line
(ANSI colours and Jenkins timestamps stripped) and adds the stage-failed markers of a pipeline.
"""
from __future__ import annotations

import re
from typing import Callable

from hp_agent.findings import Finding

PYLINT_RE = re.compile(r"^(?P<file>[^\s:][^:]*?\.py):(?P<line>\d+):(?:\d+:)?\s*\[(?P<code>[A-Z]\d{4})"
                       r"\((?P<name>[\w-]+)\)(?:,\s*(?P<obj>[^\]]*))?\]\s*(?P<msg>.*)$")
LIZARD_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): warning: (?P<msg>(?P<func>\S+) has .*)$")
CODESPELL_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): (?P<msg>\S+ ==> .+)$")
FINDING_RE = re.compile(r"^(?P<file>[^\s:][^:]*?)(?::(?P<line>\d+))?: \[(?P<rule>[\w-]+)\] (?P<msg>.*)$")
#: the node id may carry a parameter id with spaces (``test_x[trainer pp 1F1B]``)
PYTEST_RE = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<node>[^\s\[]+(?:\[.*?\])?)(?: - (?P<msg>.*))?$")
PYTEST_LOC_RE = re.compile(r"^(?P<file>[\w./-]+\.py):(?P<line>\d+): (?P<exc>\w+(?:Error|Exception|Exit|Failed)\w*)")
PYTEST_SUMMARY_RE = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|"
                               r"warnings?)(?:, )?)+.*?|no tests ran.*?)\s*=*$")
STAGE_FAILED_RE = re.compile(r"(?i)^\s*(?:#+\s*)?stage\s+['\"]?(?P<stage>[\w .:/-]+?)['\"]?\s+"
                             r"(?:failed|失败)\b(?P<rest>.*)$")
SCRIPT_EXIT_RE = re.compile(r"^ERROR: script returned exit code (?P<code>\d+)")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_JENKINS_PREFIX_RE = re.compile(r"^(?:\[\d{4}-\d\d-\d\dT[\d:.]+Z\]\s*|\d\d:\d\d:\d\d\s+)")

LineParser = Callable[[str], "Finding | None"]


def clean_line(line: str) -> str:
    """A log line without ANSI colours, a carriage return or a Jenkins timestamp prefix."""
    return _JENKINS_PREFIX_RE.sub("", ANSI_RE.sub("", line.rstrip("\r")))


def pylint_line(line: str) -> Finding | None:
    """``path:line[:col]: [C0114(name), obj] message`` (our msg-template, with or without a column)."""
    m = PYLINT_RE.match(line)
    if not m:
        return None
    return Finding(m["file"], int(m["line"]), f"{m['code']}({m['name']})", m["msg"], tool="pylint")


def lizard_line(line: str) -> Finding | None:
    """``path:line: warning: func has N NLOC, N CCN, ...`` (lizard -w)."""
    m = LIZARD_RE.match(line)
    return Finding(m["file"], int(m["line"]), "lizard-ccn", m["msg"], tool="lizard") if m else None


def codespell_line(line: str) -> Finding | None:
    """``path:line: word ==> suggestion``."""
    m = CODESPELL_RE.match(line)
    return Finding(m["file"], int(m["line"]), "codespell", m["msg"], tool="codespell") if m else None


def finding_line(line: str) -> Finding | None:
    """hp-agent's own ``file[:line]: [rule] message`` lines."""
    m = FINDING_RE.match(line)
    return Finding(m["file"], int(m["line"]) if m["line"] else None, m["rule"], m["msg"]) if m else None


def pytest_line(line: str) -> Finding | None:
    """``FAILED tests/x.py::test_y - message`` / ``ERROR ...`` lines of pytest's short summary."""
    m = PYTEST_RE.match(line)
    if not m or ("::" not in m["node"] and not m["node"].endswith(".py")):
        return None
    node = m["node"]
    rule = "test-failed" if m["kind"] == "FAILED" else "test-error"
    return Finding(node.split("::")[0], None, rule, m["msg"] or m["kind"].lower(), tool="pytest", test=node)


def marker_line(line: str) -> Finding | None:
    """A pipeline's ``Stage "X" failed`` marker or Jenkins' ``script returned exit code N``."""
    m = STAGE_FAILED_RE.match(line)
    if m:
        name = m["stage"].strip()
        return Finding(None, None, "stage-failed", f"stage {name} failed{m['rest']}".strip(), tool="stage",
                       stage=name)
    m = SCRIPT_EXIT_RE.match(line)
    if m:
        return Finding(None, None, "script-exit", f"script returned exit code {m['code']}", tool="stage")
    return None


def _with_locations(findings: list[Finding], text: str) -> list[Finding]:
    """Give pytest failures the ``file:line`` of the first traceback location in their file."""
    locations: dict[str, int] = {}
    for raw in text.splitlines():
        loc = PYTEST_LOC_RE.match(clean_line(raw))
        if loc:
            locations.setdefault(loc["file"], int(loc["line"]))
    return [f._replace(line=locations[f.file]) if f.tool == "pytest" and f.line is None
            and f.file in locations else f for f in findings]


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.tool, f.key(), f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _parse(text: str, parsers: tuple[LineParser, ...], stage: str | None = None) -> list[Finding]:
    findings = []
    for raw in text.splitlines():
        line = clean_line(raw)
        for parser in parsers:
            found = parser(line)
            if found:
                findings.append(found._replace(stage=found.stage or stage) if stage else found)
                break
    return _dedupe(_with_locations(findings, text))


def parse_pylint(text: str) -> list[Finding]:
    """Findings of a pylint run."""
    return _parse(text, (pylint_line,))


def parse_lizard(text: str) -> list[Finding]:
    """Findings of a lizard -w run."""
    return _parse(text, (lizard_line,))


def parse_codespell(text: str) -> list[Finding]:
    """Findings of a codespell run."""
    return _parse(text, (codespell_line,))


def parse_findings(text: str) -> list[Finding]:
    """Findings printed by hp-agent's own checks."""
    return _parse(text, (finding_line,))


def parse_pytest(text: str) -> list[Finding]:
    """Failed and erroring tests of a pytest run (with the traceback's ``file:line`` where printed)."""
    return _parse(text, (pytest_line,))


def parse_log(text: str, stage: str | None = None) -> list[Finding]:
    """Every finding in a whole CI log (every parser on every line), tagged with ``stage``."""
    return _parse(text, (pylint_line, lizard_line, codespell_line, pytest_line, marker_line), stage)


def pytest_summary(text: str) -> str:
    """pytest's final summary line (e.g. ``3 passed, 1 failed in 2.10s``), '' when absent."""
    for line in reversed(text.splitlines()):
        m = PYTEST_SUMMARY_RE.match(line.strip())
        if m:
            return m.group(1).strip()
    return ""


PARSERS: dict[str, Callable[[str], list[Finding]]] = {
    "pylint": parse_pylint, "lizard": parse_lizard, "codespell": parse_codespell, "findings": parse_findings,
    "pytest": parse_pytest}
