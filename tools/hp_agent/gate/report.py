# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Gate reports: ``.gate/reports/<UTC timestamp>.json``, ``.gate/last.json`` and ``.gate/last.md``.

JSON shape (read by gate-doctor and autogit)::

    {"started": iso, "finished": iso, "passed": bool, "changed_only": bool,
     "stages": [{"name": str, "status": "passed"|"failed"|"not-run", "duration_s": float, "command": str,
                 "findings": [{"file": str, "line": int|null, "rule": str, "message": str}],
                 "log_tail": str}]}
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from hp_agent.findings import Finding

STATUSES = ("passed", "failed", "not-run")
REPORT_DIR = Path(".gate")


def utc_now() -> _dt.datetime:
    """Return the current time in UTC (timezone-aware)."""
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass
class StageResult:
    """The outcome of one gate stage."""

    name: str
    status: str
    duration_s: float
    command: str
    findings: list[Finding] = field(default_factory=list)
    log_tail: str = ""

    def to_dict(self) -> dict:
        """Return the stage in report JSON form."""
        if self.status not in STATUSES:
            raise ValueError(f"stage {self.name}: status {self.status!r} is not one of {STATUSES}")
        return {"name": self.name, "status": self.status, "duration_s": round(self.duration_s, 3),
                "command": self.command, "findings": [f.to_dict() for f in self.findings],
                "log_tail": self.log_tail}


@dataclass
class GateReport:
    """A whole gate run."""

    started: _dt.datetime
    finished: _dt.datetime
    changed_only: bool
    stages: list[StageResult]

    @property
    def passed(self) -> bool:
        """True when no stage failed ("not-run" stages, e.g. nothing changed in scope, do not fail the gate)."""
        return all(s.status != "failed" for s in self.stages)

    def to_dict(self) -> dict:
        """Return the report in its JSON form."""
        return {"started": self.started.isoformat(), "finished": self.finished.isoformat(), "passed": self.passed,
                "changed_only": self.changed_only, "stages": [s.to_dict() for s in self.stages]}


_MD = jinja2.Environment(autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_MD_TEMPLATE = _MD.from_string("""\
# Gate report: {{ "PASSED" if r.passed else "FAILED" }}

Started {{ r.started }}, finished {{ r.finished }}{{ " (changed files only)" if r.changed_only else "" }}.

| stage | status | duration (s) | findings |
|---|---|---|---|
{% for s in r.stages %}
| {{ s.name }} | {{ s.status }} | {{ "%.1f" | format(s.duration_s) }} | {{ s.findings | length }} |
{% endfor %}
{% for s in r.stages if s.status == "failed" %}

## {{ s.name }} (failed)

Command: `{{ s.command }}`

{% for f in s.findings %}
- `{{ f.file }}{{ ":%s" % f.line if f.line is not none else "" }}` [{{ f.rule }}] {{ f.message }}
{% endfor %}

```text
{{ s.log_tail }}
```
{% endfor %}
""")


def render_markdown(report: GateReport | dict) -> str:
    """Render a report (object or JSON dict) as Markdown."""
    data = report.to_dict() if isinstance(report, GateReport) else report
    return _MD_TEMPLATE.render(r=data)


def write_report(report: GateReport, root: Path) -> Path:
    """Write the report under ``root/.gate`` and return the path of the timestamped JSON file."""
    out_dir = root / REPORT_DIR / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    stamp = report.started.strftime("%Y%m%dT%H%M%S.%fZ")
    path = out_dir / f"{stamp}.json"
    path.write_text(text, encoding="utf-8")
    (root / REPORT_DIR / "last.json").write_text(text, encoding="utf-8")
    (root / REPORT_DIR / "last.md").write_text(render_markdown(data), encoding="utf-8")
    return path


def load_report(path: Path) -> dict:
    """Load a report JSON file, checking its top-level shape."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = {"started", "finished", "passed", "changed_only", "stages"} - set(data)
    if missing:
        raise ValueError(f"{path}: not a gate report, missing {sorted(missing)}")
    return data
