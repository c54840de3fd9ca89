# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where gate-doctor gets its facts: the code host + Jenkins (remote) or local ``hp-agent gate run`` reports.

Both backends expose the same small interface, so one state machine drives both:
``snapshot()``, ``post(command)``, ``find_build(since_s, exclude)``, ``diagnose_build(number)``,
``changed_files()``, ``master_failures()`` and ``root``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

from hp_agent.autogit.codehost import CodeHost
from hp_agent.gate_doctor import builds as B
from hp_agent.gate_doctor.jenkins import JenkinsClient
from hp_agent.findings import Finding
from hp_agent.parsers import parse_log
from hp_agent.gate_doctor.skips import added_skips, split_git_diff
from hp_agent.gate_doctor.protocol import CMD_CHECK, CMD_RETEST, FAILURE_RESULTS, LABEL_CHECK, LABEL_PIPELINE

SINCE_MARGIN_S = 120.0
MASTER_BUILDS = 3


def _failed_stage(stage: dict) -> bool:
    return stage["status"] in ("FAILED", "UNSTABLE", "failed")


class RemoteBackend:
    """GitCode (or Gitee/GitHub) PR + Jenkins job."""

    def __init__(self, pr: int, host: CodeHost, jenkins: JenkinsClient, root: Path, bypass_max_s: float = 60.0,
                 base_branch: str = "master") -> None:
        self.pr, self.host, self.jenkins, self.root = pr, host, jenkins, root
        self.bypass_max_s = bypass_max_s
        self.base_branch = base_branch

    def snapshot(self) -> dict:
        """Head sha, labels and comments of the PR right now."""
        pr = self.host.get_pr(self.pr)
        return {"head_sha": pr["head_sha"], "labels": pr["labels"], "comments": self.host.list_comments(self.pr),
                "author": pr["user"], "title": pr["title"]}

    def post(self, command: str) -> None:
        """Post a gate command (``/check-pr``, ``/retest``) or a message as a PR comment."""
        self.host.post_comment(self.pr, command)

    def find_build(self, since_s: float | None, exclude: set[int]) -> dict | None:
        """The newest non-aborted build of the PR started after ``since_s`` (margin for clock skew).

        When no build exists yet, a queue item of the job for this PR is returned as
        ``{"number": None, "queued": True, "why": …}``.
        """
        since_ms = None if since_s is None else (since_s - SINCE_MARGIN_S) * 1000.0
        found = B.builds_for_pr(self.jenkins.list_builds(), self.pr, since_ms, exclude)
        if found:
            return found[0]
        for item in self.jenkins.queue_items():
            if B.match_reason(item, self.pr) and not item.get("cancelled"):
                return {"number": None, "queued": True, "why": item.get("why"), "queue_id": item.get("id")}
        return None

    def diagnose_build(self, number: int) -> dict:
        """Stages, bypass signals and parsed findings of build ``number`` (failing stages' logs only)."""
        build = self.jenkins.build(number)
        describe = self.jenkins.describe(number)
        stages = B.stage_summary(describe) if describe is not None else None
        findings: list[Finding] = []
        log_source = None
        if build.get("building"):
            text, _next, _more = self.jenkins.progressive_text(number, 0)
            findings, log_source = parse_log(text), "progressiveText (build running)"
        elif build.get("result") in FAILURE_RESULTS:
            findings, log_source = self._failure_findings(number, stages)
        return {"build": _build_view(build, self.pr), "stages": _public_stages(stages),
                "bypass": B.bypass_signals(build, stages, self.bypass_max_s), "findings": findings,
                "log_source": log_source}

    def _failure_findings(self, number: int, stages: list[dict] | None) -> tuple[list[Finding], str]:
        failed = [s for s in stages or [] if _failed_stage(s)]
        findings: list[Finding] = []
        sources = []
        for stage in failed:
            text = self.jenkins.stage_log(number, stage["_raw"])
            if text:
                findings.extend(parse_log(text, stage["name"]))
                sources.append(f"wfapi log of stage {stage['name']}")
        if not sources:
            findings = parse_log(self.jenkins.console_text(number), failed[0]["name"] if failed else None)
            sources.append("consoleText")
        return findings, ", ".join(sources)

    def count_posts(self, body: str) -> int:
        """How many PR comments have exactly ``body`` (whoever wrote them)."""
        return sum(1 for c in self.host.list_comments(self.pr) if (c.get("body") or "").strip() == body.strip())

    def changed_files(self) -> list[str]:
        """Paths changed by the PR according to the code host."""
        return self.host.list_files(self.pr)

    def added_skips(self) -> list[dict]:
        """Skip/xfail markers the PR adds (temporary-skip ledger)."""
        return [s for name, patch in self.host.list_file_patches(self.pr) for s in added_skips(name, patch)]

    def master_failures(self) -> set[str]:
        """Failure keys of the last few base-branch builds of the job (not PR builds)."""
        keys: set[str] = set()
        seen = 0
        for build in self.jenkins.list_builds():
            params = B.build_parameters(build)
            if seen >= MASTER_BUILDS or build.get("building"):
                continue
            if self.base_branch not in params.values() or B.is_pr_build(build):
                continue
            seen += 1
            if build.get("result") in FAILURE_RESULTS:
                keys.update(f.key() for f in parse_log(self.jenkins.console_text(int(build["number"]))))
        return keys


def _build_view(build: dict, pr: int) -> dict:
    return {"number": build.get("number"), "result": build.get("result"), "building": bool(build.get("building")),
            "duration_s": float(build.get("duration") or 0) / 1000.0, "timestamp_ms": build.get("timestamp"),
            "url": build.get("url"), "matched_by": B.match_reason(build, pr)}


def _public_stages(stages: list[dict] | None) -> list[dict] | None:
    if stages is None:
        return None
    return [{k: v for k, v in s.items() if k != "_raw"} for s in stages]


class LocalBackend:
    """The same protocol over local gate reports: ``/retest`` runs the gate, a report is a build.

    ``pr-check-pass`` is present when the HEAD commit message passes the commit-msg policy; the
    ``ci-pipeline-passed`` label is present when the newest report is a passing run made after ``/retest``
    for the current HEAD.
    """

    def __init__(self, root: Path, runner: Callable[[], Path] | None = None, report: Path | None = None,
                 gate_args: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.gate_args = tuple(gate_args)
        self.runner = runner or self._run_gate
        self.fixed_report = Path(report) if report else None
        self.reports_dir = self.root / ".gate" / "reports"
        self._ledger = self.root / ".gate" / "doctor" / "local-runs.json"
        self._comments = self.root / ".gate" / "doctor" / "local-comments.json"

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True, check=True).stdout.strip()

    def _runs(self) -> list[dict]:
        if not self._ledger.is_file():
            return []
        return json.loads(self._ledger.read_text(encoding="utf-8"))

    def _save_runs(self, runs: list[dict]) -> None:
        self._write_json(self._ledger, runs)

    def snapshot(self) -> dict:
        """HEAD sha and the labels the local protocol grants."""
        from hp_agent.autogit.policy import check_message  # pylint: disable=import-outside-toplevel
        head = self._git("rev-parse", "HEAD")
        labels = []
        if not check_message(self._git("log", "-1", "--format=%B"))[0]:
            labels.append(LABEL_CHECK)
        runs = [r for r in self._runs() if r["head_sha"] == head]
        if runs and _load(Path(runs[-1]["report"])).get("passed"):
            labels.append(LABEL_PIPELINE)
        return {"head_sha": head, "labels": labels, "comments": [], "author": None, "title": None}

    def post(self, command: str) -> None:
        """``/retest`` runs the gate (or takes the given report); other comments are recorded in a log."""
        if command.strip() != CMD_RETEST:
            posted = self._posted()
            posted.append(command)
            self._write_json(self._comments, posted)
            return
        report = self.fixed_report or self.runner()
        runs = self._runs()
        runs.append({"number": len(runs) + 1, "report": str(report), "head_sha": self._git("rev-parse", "HEAD")})
        self._save_runs(runs)

    def count_posts(self, body: str) -> int:
        """``/retest``: the local gate runs recorded; other bodies: the local comment log."""
        if body.strip() == CMD_RETEST:
            return len(self._runs())
        return sum(1 for c in self._posted() if c.strip() == body.strip())

    def _posted(self) -> list[str]:
        if not self._comments.is_file():
            return []
        return json.loads(self._comments.read_text(encoding="utf-8"))

    def _write_json(self, path: Path, data: object) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, path)

    def find_build(self, since_s: float | None, exclude: set[int]) -> dict | None:
        """The newest recorded run not in ``exclude`` (runs are synchronous, so ``since_s`` is not needed)."""
        del since_s
        for run in reversed(self._runs()):
            if run["number"] not in exclude:
                return {"number": run["number"], "building": False}
        return None

    def diagnose_build(self, number: int) -> dict:
        """Stages and findings of local run ``number`` from its gate report."""
        runs = {r["number"]: r for r in self._runs()}
        if number not in runs:
            raise ValueError(f"no local gate run #{number}; known: {sorted(runs)}")
        return diagnose_report(_load(Path(runs[number]["report"])), number)

    def _base(self) -> str | None:
        head = self._git("rev-parse", "HEAD")
        for base in ("upstream/master", "origin/master", "master", "main"):
            proc = subprocess.run(["git", "merge-base", base, "HEAD"], cwd=self.root, capture_output=True,
                                  text=True, check=False)
            if proc.returncode == 0 and proc.stdout.strip() != head:
                return proc.stdout.strip()
        return None

    def changed_files(self) -> list[str]:
        """Files changed on this branch against the merge base with master/main (or HEAD's own files)."""
        base = self._base()
        if base:
            return self._git("diff", "--name-only", f"{base}...HEAD").splitlines()
        return self._git("show", "--name-only", "--format=", "HEAD").splitlines()

    def added_skips(self) -> list[dict]:
        """Skip/xfail markers this branch adds against its base (temporary-skip ledger)."""
        base = self._base()
        if base:
            diff = self._git("diff", f"{base}...HEAD")
        elif self._has_parent():
            diff = self._git("diff", "HEAD~1", "HEAD")
        else:
            return []
        return [s for name, patch in split_git_diff(diff) for s in added_skips(name, patch)]

    def _has_parent(self) -> bool:
        return subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD~1"], cwd=self.root,
                              capture_output=True, check=False).returncode == 0

    def master_failures(self) -> set[str]:
        """No base-branch history locally."""
        return set()

    def _run_gate(self) -> Path:
        proc = subprocess.run([sys.executable, "-m", "hp_agent", "gate", "run", *self.gate_args], cwd=self.root,
                              check=False, capture_output=True, text=True)
        last = self.root / ".gate" / "last.json"
        if not last.is_file():
            raise RuntimeError(f"`hp-agent gate run` wrote no report (exit {proc.returncode}): {proc.stderr[-500:]}")
        runs_dir = self.root / ".gate" / "doctor" / "reports"
        runs_dir.mkdir(parents=True, exist_ok=True)
        copy = runs_dir / f"run-{len(self._runs()) + 1}.json"
        copy.write_text(last.read_text(encoding="utf-8"), encoding="utf-8")
        return copy


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable gate report ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise ValueError(f"{path}: not a gate report (expected a 'stages' list)")
    return data


def _stage_findings(st: dict) -> list[Finding]:
    """Findings of one failed report stage: its structured findings, then anything new in its log tail."""
    default_tool = _tool_of(st.get("name") or "")
    found = [_report_finding(f, default_tool, st.get("name")) for f in st.get("findings") or []]
    known = {(x.file, x.line) for x in found if x.file} | {x.test for x in found if x.test}
    found.extend(p for p in parse_log(st.get("log_tail") or "", st.get("name"))
                 if (p.file, p.line) not in known and p.test not in known)
    if not found:
        found.append(Finding(None, None, "stage-failed", f"stage {st.get('name')} failed", tool="stage",
                             stage=st.get("name")))
    return found


def _report_finding(f: dict, default_tool: str, stage: str | None) -> Finding:
    """A finding of a gate report (JSON) as a :class:`Finding` (older reports lack ``tool``/``test``)."""
    return Finding(f.get("file"), f.get("line"), f.get("rule") or default_tool, f.get("message") or "",
                   tool=f.get("tool") or default_tool, test=f.get("test"), stage=stage)


def diagnose_report(report: dict, number: int = 1) -> dict:
    """Turn a gate report into the same diagnosis shape as a Jenkins build."""
    stages = [{"id": str(i), "name": s.get("name"), "status": s.get("status"),
               "duration_s": float(s.get("duration_s") or 0)} for i, s in enumerate(report["stages"])]
    findings = [f for st in report["stages"] if st.get("status") == "failed" for f in _stage_findings(st)]
    passed = bool(report.get("passed"))
    build = {"number": number, "result": "SUCCESS" if passed else "FAILURE", "building": False,
             "duration_s": sum(s["duration_s"] for s in stages), "timestamp_ms": None, "url": None,
             "matched_by": "local gate report"}
    none_run = passed and all(s["status"] == "not-run" for s in stages)
    bypass = {"is_bypass": none_run, "structural": none_run, "short_duration": False,
              "duration_s": build["duration_s"], "reason": "no gate stage was run" if none_run else None}
    return {"build": build, "stages": stages, "bypass": bypass, "findings": findings, "log_source": "gate report"}


def _tool_of(stage_name: str) -> str:
    low = stage_name.lower()
    for tool in ("pylint", "lizard", "codespell"):
        if tool in low:
            return tool
    return "pytest" if any(w in low for w in ("test", "ut", "st", "pytest")) else "stage"


__all__ = ["LocalBackend", "RemoteBackend", "diagnose_report", "CMD_CHECK"]
