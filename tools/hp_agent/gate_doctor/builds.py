# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Match Jenkins builds to a PR and classify them (bypass detection included)."""
from __future__ import annotations

import re

from hp_agent.gate_doctor.protocol import NOT_EXECUTED, SUCCESS_RESULTS

_PR_PARAM_RE = re.compile(r"(?i)(pr|pull|merge|iid|mr)")


def _pr_ref_re(pr: int) -> re.Pattern:
    return re.compile(rf"(?i)(?:\bPR[ #:_-]*|!|#|pulls?/|merge_requests/){int(pr)}\b")


def _actions(build: dict) -> list[dict]:
    return [a for a in build.get("actions") or [] if isinstance(a, dict)]


def build_parameters(build: dict) -> dict[str, str]:
    """``{name: value}`` of the build's parameters."""
    return {p.get("name"): str(p.get("value")) for a in _actions(build) for p in a.get("parameters") or []
            if isinstance(p, dict) and p.get("name")}


def build_causes(build: dict) -> list[str]:
    """Short descriptions of the build's causes."""
    return [c.get("shortDescription") or "" for a in _actions(build) for c in a.get("causes") or []
            if isinstance(c, dict)]


def match_reason(build: dict, pr: int) -> str | None:
    """How ``build`` belongs to PR ``pr`` (``parameter NAME``, ``cause``, ``description``) or None."""
    for name, value in build_parameters(build).items():
        if _PR_PARAM_RE.search(name) and value.strip() == str(pr):
            return f"parameter {name}"
    ref = _pr_ref_re(pr)
    if any(ref.search(c) for c in build_causes(build)):
        return "cause"
    if ref.search(build.get("description") or ""):
        return "description"
    return None


_ANY_PR_RE = re.compile(r"(?i)(?:\bPR[ #:_-]*|!|pulls?/|merge_requests/)\d+\b")


def is_pr_build(build: dict) -> bool:
    """True when a build belongs to some PR (PR-like parameter set, or a PR reference in causes/description)."""
    if any(_PR_PARAM_RE.search(k) and v.strip() for k, v in build_parameters(build).items()):
        return True
    texts = build_causes(build) + [build.get("description") or ""]
    return any(_ANY_PR_RE.search(t) for t in texts)


def builds_for_pr(builds: list[dict], pr: int, since_ms: float | None = None,
                  exclude: set[int] | None = None) -> list[dict]:
    """Non-aborted builds of ``pr`` (newest first), optionally started after ``since_ms``, minus ``exclude``."""
    out = []
    for build in sorted(builds, key=lambda b: int(b.get("number", 0)), reverse=True):
        if build.get("result") == "ABORTED" or match_reason(build, pr) is None:
            continue
        if since_ms is not None and float(build.get("timestamp") or 0) < since_ms:
            continue
        if exclude and int(build["number"]) in exclude:
            continue
        out.append(build)
    return out


def stage_summary(describe: dict | None) -> list[dict]:
    """``[{id, name, status, duration_s}]`` from a ``wfapi/describe`` answer (empty when absent)."""
    stages = (describe or {}).get("stages") or []
    return [{"id": s.get("id"), "name": s.get("name"), "status": s.get("status"),
             "duration_s": round(float(s.get("durationMillis") or 0) / 1000.0, 3), "_raw": s} for s in stages]


def bypass_signals(build: dict, stages: list[dict] | None, bypass_max_s: float) -> dict:
    """Decide whether a successful build is a fake-green bypass.

    Structural signal: the pipeline is known and no stage was executed (all NOT_EXECUTED/SKIPPED, or
    none at all).  Duration signal: the build took less than ``bypass_max_s``.  The build is a bypass when
    the structural signal fires, or when stages are unknown (no ``wfapi``) and the duration signal fires.
    """
    duration_s = float(build.get("duration") or 0) / 1000.0
    short = build.get("result") in SUCCESS_RESULTS and not build.get("building") and duration_s < bypass_max_s
    structural = None
    if stages is not None:
        executed = [s for s in stages if s["status"] not in NOT_EXECUTED]
        structural = build.get("result") in SUCCESS_RESULTS and not executed
    is_bypass = bool(structural) if structural is not None else bool(short)
    reasons = []
    if structural:
        reasons.append("no gate stage was executed")
    if short:
        reasons.append(f"finished in {duration_s:.0f}s (< {bypass_max_s:.0f}s)")
    return {"is_bypass": is_bypass, "structural": structural, "short_duration": short,
            "duration_s": duration_s, "reason": "; ".join(reasons) or None}
