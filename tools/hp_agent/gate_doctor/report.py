# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One-shot diagnosis of a PR's gate and the final watch report."""
from __future__ import annotations

import datetime as _dt

from hp_agent.gate_doctor import protocol as P
from hp_agent.gate_doctor.machine import Backend, _public_diag
from hp_agent.gate_doctor.state import WatchState
from hp_agent.gate_doctor.triage import triage

_NEXT = {
    "passed": "Nothing: the gate is green (real build passed, both labels present).",
    "passed-with-skips": "The gate is green, but remove the temporary skips listed in skip_ledger (fix the tests "
                         "instead) before the PR is merged.",
    "patch-ceiling": "Two fix commits did not make the gate green; ask a person to review the remaining failures.",
    "flake-ceiling": "Five flake retests were used; ask a maintainer to look at the recurring failures.",
    "needs-human": "Read the note and the last diagnosis; a person must decide the next step.",
    "sticky-flake": "A maintainer was asked (PR comment) to look at failures unrelated to this PR.",
    "interrupted": "Run `hp-agent gate-doctor watch` again; it resumes where it stopped.",
    "await-fix": "Fix the listed failures (file, line, rule) in order, commit with `hp-agent git commit`, push "
                 "with `hp-agent git update`, then run `hp-agent gate-doctor watch` again.",
}


def diagnose(backend: Backend, pr: str, build_number: int | None = None) -> dict:
    """Everything known about the PR's gate now: labels, newest non-aborted build, stages, findings, verdict."""
    snap = backend.snapshot()
    out = {"pr": pr, "head_sha": snap["head_sha"], "labels": snap["labels"],
           "signals": _signals(snap), "build": None, "verdict": "no-build", "green": False}
    if build_number is None:
        build = backend.find_build(None, set())
        build_number = int(build["number"]) if build else None
    if build_number is None:
        return out
    diag = backend.diagnose_build(build_number)
    out.update(_public_diag(diag))
    out["verdict"] = _verdict(diag)
    out["green"] = P.is_green(snap["labels"], out["verdict"] == "passed")
    if out["verdict"] == "failed":
        ctx = {"root": backend.root, "changed": backend.changed_files(), "master_failures": backend.master_failures(),
               "history": [[f.key() for f in diag["findings"]]]}
        out["triage"] = triage(diag["findings"], ctx)
    return out


def _verdict(diag: dict) -> str:
    build = diag["build"]
    if build.get("building"):
        return "running"
    if diag["bypass"]["is_bypass"]:
        return "bypass"
    if build.get("result") in P.SUCCESS_RESULTS:
        return "passed"
    if build.get("result") == "ABORTED":
        return "aborted"
    return "failed"


def _signals(snap: dict) -> dict:
    comments = snap.get("comments") or []
    bot = [c for c in comments if c.get("user") and c.get("user") != snap.get("author")
           and not (c.get("body") or "").startswith("/")]
    return {"has_pr_check_pass": P.LABEL_CHECK in snap["labels"],
            "has_ci_pipeline_passed": P.LABEL_PIPELINE in snap["labels"],
            "check_rejected": any(P.CHECK_FAILED_RE.search(c.get("body") or "") for c in bot[-3:]),
            "last_bot_comments": [{"user": c["user"], "created_at": c["created_at"], "body": c["body"][:500]}
                                  for c in bot[-3:]],
            "gate_commands": [c["body"].strip() for c in comments if (c.get("body") or "").strip() in
                              (P.CMD_CHECK, P.CMD_RETEST)][-5:]}


def final_report(state: WatchState) -> dict:
    """Status, timeline, fixes, unresolved failures, counters and what to do next."""
    status = state.terminal or state.phase
    triage_result = state.last_triage or {}
    unresolved = [] if state.terminal == "passed" else list(triage_result.get("items", []))
    return {"pr": state.pr, "status": status, "terminal": state.terminal is not None, "note": state.note,
            "head_sha": state.head_sha, "builds_seen": state.builds_seen, "bypass_builds": state.bypass_builds,
            "counters": state.counters(), "skip_ledger": state.skip_ledger,
            "fixes": triage_result.get("fixes", []) if status == "await-fix" else [],
            "unresolved": unresolved, "timeline": state.timeline, "next": _next(status, state)}


def _next(status: str, state: WatchState) -> str:
    if status == "passed" and state.skip_ledger:
        return _NEXT["passed-with-skips"]
    return _NEXT.get(status, "Run watch again.")


def render_text(report: dict) -> str:
    """Human-readable rendering of :func:`final_report`."""
    lines = [f"PR {report['pr']}: {report['status']}" + (f" — {report['note']}" if report["note"] else ""),
             f"head {str(report['head_sha'])[:12]}; builds {report['builds_seen']}; bypass builds "
             f"{report['bypass_builds']}",
             "counters: " + ", ".join(f"{k}={v}" for k, v in report["counters"].items())]
    if report["fixes"]:
        lines.append("fix, in this order:")
        lines += [f"  {i}. {f['file']}:{f['line']} {f['rule']}: {f['message']} → {f['hint']}"
                  for i, f in enumerate(report["fixes"], 1)]
    if report["skip_ledger"]:
        lines.append("temporary skips added by the PR (remove before merge):")
        lines += [f"  - {s['file']}:{s['line']}: {s['text']}" for s in report["skip_ledger"]]
    if report["unresolved"]:
        lines.append("unresolved failures:")
        lines += [f"  - {u['key']} ({u['decision']}): {u['finding']['message'][:160]}" for u in report["unresolved"]]
    lines.append("timeline:")
    for ev in report["timeline"][-30:]:
        when = _dt.datetime.fromtimestamp(ev["t"], _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        extra = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "phase", "event"))
        lines.append(f"  {when} [{ev['phase']}] {ev['event']} {extra}")
    lines.append(f"next: {report['next']}")
    return "\n".join(lines)
