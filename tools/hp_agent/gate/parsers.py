# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reading findings (file, line, rule, message) out of each gate tool's output."""
from __future__ import annotations

import re

from hp_agent.checks.findings import Finding

_PYLINT = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): "
                     r"\[(?P<rule>[A-Z]\d{4}\([\w-]+\))(?:, [^\]]*)?\] (?P<msg>.*)$")
_LIZARD = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): warning: (?P<msg>.*)$")
_CODESPELL = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): (?P<msg>.+ ==> .*)$")
_FINDING = re.compile(r"^(?P<file>[^\s:][^:]*?)(?::(?P<line>\d+))?: \[(?P<rule>[\w-]+)\] (?P<msg>.*)$")
_PYTEST_NODE = re.compile(r"^(?:FAILED|ERROR) (?P<node>\S+)")
_PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)"
                             r"(?:, )?)+.*?|no tests ran.*?)\s*=*$")


def _line(value: str | None) -> int | None:
    return int(value) if value else None


def _collect(pattern: re.Pattern, text: str, rule: str | None) -> list[Finding]:
    return [Finding(m["file"], _line(m["line"]), rule or m["rule"], m["msg"])
            for m in map(pattern.match, text.splitlines()) if m]


def parse_pylint(text: str) -> list[Finding]:
    """``path:line: [C0114(missing-module-docstring), obj] message`` (our msg-template)."""
    return _collect(_PYLINT, text, None)


def parse_lizard(text: str) -> list[Finding]:
    """``path:line: warning: func has N NLOC, N CCN, ...`` (lizard -w)."""
    return _collect(_LIZARD, text, "lizard-ccn")


def parse_codespell(text: str) -> list[Finding]:
    """``path:line: word ==> suggestion``."""
    return _collect(_CODESPELL, text, "codespell")


def parse_findings(text: str) -> list[Finding]:
    """hp-agent's own ``file:line: [rule] message`` lines."""
    return _collect(_FINDING, text, None)


def parse_pytest(text: str) -> list[Finding]:
    """``FAILED tests/x.py::test_y - message`` lines of pytest's short summary."""
    out = []
    for line in text.splitlines():
        m = _PYTEST_NODE.match(line)
        if not m:
            continue
        node = m["node"]
        msg = line.split(" - ", 1)[1] if " - " in line else line.split(" ", 1)[0].lower()
        out.append(Finding(node.split("::", 1)[0], None, "pytest", f"{node}: {msg}"))
    return out


def pytest_summary(text: str) -> str:
    """pytest's final summary line (e.g. ``3 passed, 1 failed in 2.10s``), '' when absent."""
    for line in reversed(text.splitlines()):
        m = _PYTEST_SUMMARY.match(line.strip())
        if m:
            return m.group(1).strip()
    return ""


PARSERS = {"pylint": parse_pylint, "lizard": parse_lizard, "codespell": parse_codespell,
           "findings": parse_findings, "pytest": parse_pytest}
