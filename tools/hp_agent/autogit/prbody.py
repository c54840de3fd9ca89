# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fill the repository's PR template: kind, what and why, linked issue, test plan and result.

The linked issue comes only from ``Fixes #N`` trailers of the commits in the PR (never invented); the
test plan and result come only from the last ``hp-agent gate run`` report (``.gate/last.json``).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

TEMPLATES = {
    "gitcode": ".gitee/PULL_REQUEST_TEMPLATE.zh-CN.md",
    "gitee": ".gitee/PULL_REQUEST_TEMPLATE.zh-CN.md",
    "github": ".github/PULL_REQUEST_TEMPLATE.md",
}
FIXES_RE = re.compile(r"^\s*(?:Fixes|Closes|Resolves):?\s+#(\d+)\s*$", re.IGNORECASE | re.MULTILINE)
_SECTION_KEYS = (
    ("kind", ("类型", "kind")),
    ("what", ("做了什么", "what and why")),
    ("issue", ("issue",)),
    ("plan", ("测试计划", "test plan")),
    ("result", ("测试结果", "test result")),
)
_TEXT = {
    "zh": {"none": "无", "no_report": "未找到 `hp-agent gate run` 的报告（.gate/last.json），尚未在本地运行门禁。",
           "passed": "通过", "failed": "失败", "overall": "总体结果", "report": "报告时间"},
    "en": {"none": "None", "no_report": "No `hp-agent gate run` report (.gate/last.json) found; the gate has "
                                         "not been run locally.",
           "passed": "passed", "failed": "FAILED", "overall": "Overall", "report": "Report finished"},
}


@dataclasses.dataclass
class PrFacts:
    """What the body is built from."""

    kind: str
    what: str
    issues: list[int]
    gate_report: dict | None


def fixes_trailers(messages: list[str]) -> list[int]:
    """Issue numbers named by ``Fixes #N`` trailers (last paragraph of each message), in order, unique."""
    found: list[int] = []
    for message in messages:
        trailer_block = message.strip().split("\n\n")[-1]
        for match in FIXES_RE.finditer(trailer_block):
            number = int(match.group(1))
            if number not in found:
                found.append(number)
    return found


def load_gate_report(root: Path) -> dict | None:
    """The last gate report, or None when absent; ValueError naming the file when unreadable."""
    path = root / ".gate" / "last.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable gate report ({exc})") from exc
    if not isinstance(data, dict) or "stages" not in data:
        raise ValueError(f"{path}: not a gate report (no 'stages')")
    return data


def _section_key(heading: str) -> str | None:
    low = heading.lower()
    for key, words in _SECTION_KEYS:
        if any(w in low for w in words):
            return key
    return None


def _kind_lines(lines: list[str], kind: str) -> list[str]:
    out = []
    for line in lines:
        match = re.match(r"^- \[[ xX]\] (\w+)", line)
        if match:
            mark = "x" if match.group(1) == kind else " "
            line = f"- [{mark}]" + line[5:]
        out.append(line)
    return out


def _plan(report: dict | None, lang: str) -> str:
    if report is None:
        return _TEXT[lang]["no_report"]
    rows = [f"- `{st.get('name')}`: `{st.get('command') or ''}`" for st in report.get("stages", [])]
    scope = "changed files only" if report.get("changed_only") else "whole repository"
    if lang == "zh":
        scope = "仅改动文件" if report.get("changed_only") else "全仓"
    return "\n".join(["`hp-agent gate run` (" + scope + "):", *rows])


def _result(report: dict | None, lang: str) -> str:
    text = _TEXT[lang]
    if report is None:
        return text["no_report"]
    overall = text["passed"] if report.get("passed") else text["failed"]
    rows = [f"- **{text['overall']}: {overall}** ({text['report']}: {report.get('finished')})"]
    for st in report.get("stages", []):
        dur = st.get("duration_s")
        dur_s = f", {dur:.1f}s" if isinstance(dur, (int, float)) else ""
        rows.append(f"- {st.get('name')}: {st.get('status')}{dur_s}, {len(st.get('findings') or [])} finding(s)")
    return "\n".join(rows)


def _content(key: str, facts: PrFacts, lang: str) -> str:
    if key == "what":
        return facts.what
    if key == "issue":
        return "\n".join(f"Fixes #{n}" for n in facts.issues) or _TEXT[lang]["none"]
    if key == "plan":
        return _plan(facts.gate_report, lang)
    return _result(facts.gate_report, lang)


def fill_template(template: str, facts: PrFacts) -> str:
    """Return the template with every known section filled from ``facts`` (unknown sections kept)."""
    lang = "zh" if re.search(r"[\u4e00-\u9fff]", template) else "en"
    out: list[str] = []
    key = None
    body: list[str] = []

    def flush() -> None:
        if key == "kind":
            out.extend(_kind_lines(body, facts.kind))
        elif key is not None:
            out.extend([_content(key, facts, lang), ""])
        else:
            out.extend(body)

    for line in template.splitlines():
        if line.startswith("#"):
            flush()
            key, body = _section_key(line), []
            out.append(line)
        else:
            body.append(line)
    flush()
    return "\n".join(out).rstrip() + "\n"


def read_template(root: Path, provider: str) -> str:
    """The provider's template text; FileNotFoundError naming the expected path when missing."""
    rel = TEMPLATES.get(provider)
    if rel is None:
        raise ValueError(f"provider {provider!r} has no PR template; expected one of {', '.join(TEMPLATES)}")
    path = root / rel
    if not path.is_file():
        raise FileNotFoundError(f"PR template {rel} is missing in {root}")
    return path.read_text(encoding="utf-8")
