# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent dist-op dev``: from a confirmed plan to files, UT, torch gloo ST, the gate checks and a report.

Runs never skip: a step that cannot run (MindSpore in scope without a MindSpore ST harness) is a failed
step with its reason. ``--continue`` keeps the files as they are (the fix) and re-runs every step.
"""
from __future__ import annotations

import datetime
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, PlanError, plan_state, slug_of
from hp_agent.dist_op.render import render
from hp_agent.dist_op.scaffold import Scaffold, planned_files, scaffold

__all__ = ["Run", "DevResult", "dev", "first_failure", "LICENSE_HEAD"]

LICENSE_HEAD = ("# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n"
                "# SPDX-License-Identifier: Apache-2.0\n")
_LABEL = re.compile(r"(\S+ with (?:in\d+=\[[^\]]*\](?:, )?)+)")
_FINDING = re.compile(r"\S+:\d+(:\d+)?: ")
_SKIPPED = re.compile(r"\b\d+ skipped\b|\bSKIPPED\b")
_WHERE = re.compile(r"AssertionError: (\S+ \[[^\]]*\] .*? input \[[^\]]*\])")


@dataclass
class Run:
    """One step of a dev run."""

    name: str
    command: str
    ok: bool
    seconds: float
    summary: str
    tail: str = ""
    first_failure: str = ""
    placements: str = ""

    def to_dict(self) -> dict:
        """JSON form."""
        return dict(self.__dict__)


@dataclass
class DevResult:
    """Outcome of ``dev``."""

    op: str
    green: bool
    runs: List[Run]
    report: Path
    files: List[str]
    seconds: float

    def to_dict(self) -> dict:
        """JSON form."""
        return {"op": self.op, "green": self.green, "report": str(self.report), "files": self.files,
                "seconds": round(self.seconds, 2), "runs": [r.to_dict() for r in self.runs]}


def first_failure(output: str) -> tuple:
    """(first failing test or case, its placements) from pytest output."""
    failed = next((line[len("FAILED "):].strip() for line in output.splitlines() if line.startswith("FAILED ")), "")
    if not failed:  # pylint / lizard / codespell: the first finding line
        failed = next((line.strip() for line in output.splitlines() if _FINDING.search(line)), "")
    label = _LABEL.search(output)
    where = _WHERE.search(output)
    placements = label.group(1) if label else (where.group(1) if where else "")
    return failed, placements


def _execute(name: str, argv: List[str], layout: Layout, timeout: float) -> Run:
    start = time.monotonic()
    shown = " ".join(argv)
    try:
        proc = subprocess.run(argv, cwd=layout.root, env=layout.test_env(), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        return Run(name, shown, False, time.monotonic() - start, f"timed out after {timeout:.0f} s",
                   out[-3000:])
    output = proc.stdout + proc.stderr
    lines = [line for line in output.strip().splitlines() if line.strip()]
    summary = lines[-1] if lines else f"exit {proc.returncode}"
    run = Run(name, shown, proc.returncode == 0, time.monotonic() - start, f"exit {proc.returncode}: {summary}")
    skipped = _SKIPPED.search(output)
    if run.ok and skipped:  # a skipped test is not a pass: the pipeline never skips
        run.ok = False
        run.summary += f" - {skipped.group(0)}: skipped tests are not allowed"
    if not run.ok:
        run.first_failure, run.placements = first_failure(output)
        run.tail = output[-4000:]
    return run


def _license_run(files: Scaffold, layout: Layout) -> Run:
    bad = [f for f in files.generated if f.endswith(".py")
           and not layout.path(f).read_text(encoding="utf-8").startswith(LICENSE_HEAD)]
    return Run("license header", "check the two-line license header of generated .py files", not bad, 0.0,
               "all present" if not bad else f"missing in {bad}", first_failure=", ".join(bad))


def _steps(plan: Plan, files: Scaffold, layout: Layout) -> List[tuple]:
    py = layout.interpreter
    pytest = [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly"]
    steps = [("UT", pytest + [files.ut_test], 600), ("ST torch gloo", pytest + [files.st_test], 1200)]
    spell = [f for f in files.generated if f.endswith((".py", ".yaml"))] + [f"{layout.plans_dir}/{slug_of(plan.op)}.md"]
    ignore = ["-I", "ci/codespell_ignore.txt"] if layout.path("ci/codespell_ignore.txt").is_file() else []
    steps.append(("codespell", [py, "-m", "codespell_lib", *ignore, *spell], 120))
    return steps


def _mindspore_run(plan: Plan, layout: Layout) -> Optional[Run]:
    """The MindSpore frontend step (:mod:`hp_agent.dist_op.mindspore_frontend`) when it is in scope."""
    from hp_agent.dist_op.mindspore_frontend import mindspore_step
    res = mindspore_step([plan], layout).get(plan.op)
    if res is None:
        return None
    return Run("ST MindSpore", "python -m tests.st.mindspore.generated.checks " + plan.op, res.ok, res.seconds,
               res.detail, first_failure="" if res.ok else res.detail[:300])


def dev(plan: Plan, layout: Layout, resume: bool = False) -> DevResult:
    """Scaffold (unless ``resume``), run every step, write ``plans/<op>.report.md``."""
    state = plan_state(plan)
    if state != "confirmed":
        raise PlanError(f"{plan.path}: plan is {state}; "
                        + ("run hp-agent dist-op confirm after review" if state == "draft"
                           else "it was edited after confirmation: review it and confirm again"))
    start = time.monotonic()
    if resume:
        files = planned_files(plan, layout)
        missing = [f for f in files.generated if not layout.path(f).is_file()]
        if missing:
            raise PlanError(f"--continue: generated files are missing ({missing}); run dev without --continue")
    else:
        files = scaffold(plan, layout)
    runs: List[Run] = []
    for name, argv, timeout in _steps(plan, files, layout):
        runs.append(_execute(name, argv, layout, timeout))
    runs.append(_license_run(files, layout))
    ms = _mindspore_run(plan, layout)
    if ms is not None:
        runs.append(ms)
    green = all(r.ok for r in runs)
    report = layout.path(layout.plans_dir) / f"{slug_of(plan.op)}.report.md"
    history, attempt = _history(report)
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = time.monotonic() - start
    history.append(f"run {attempt} at {at}: {'GREEN' if green else 'FAILED'} "
                   f"({', '.join(r.name + (' ok' if r.ok else ' failed') for r in runs)}; {seconds:.1f} s)")
    report.write_text(render("report.md.j2", op=plan.op, plan_path=str(plan.path.relative_to(layout.root))
                             if plan.path and plan.path.is_relative_to(layout.root) else str(plan.path),
                             confirmation=plan.meta["confirmation"], attempt=attempt, at=at, resumed=resume,
                             green=green, seconds=seconds, files=files.generated, runs=runs,
                             history=history[:-1]), encoding="utf-8")
    _append_history(report, history)
    return DevResult(plan.op, green, runs, report, files.generated, seconds)


_HISTORY = "<!-- history: "


def _history(report: Path) -> tuple:
    if not report.is_file():
        return [], 1
    lines = [line[len(_HISTORY):-4] for line in report.read_text(encoding="utf-8").splitlines()
             if line.startswith(_HISTORY)]
    return lines, len(lines) + 1


def _append_history(report: Path, entries: List[str]) -> None:
    """Keep every run's one-line summary as HTML comments at the end (read back by the next run)."""
    text = report.read_text(encoding="utf-8").rstrip("\n")
    report.write_text(text + "\n\n" + "\n".join(f"{_HISTORY}{e} -->" for e in entries) + "\n", encoding="utf-8")
