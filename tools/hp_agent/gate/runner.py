# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Running gate stages: the same commands as CI, a progress display, findings and a report per run."""
from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hp_agent.checks.review import changed_files, default_base
from hp_agent.parsers import PARSERS, pytest_summary
from hp_agent.gate.report import GateReport, StageResult, utc_now, write_report
from hp_agent.gate.stages import Stage

LOG_TAIL_LINES = 80


def _in_scope(rel: str, stage: Stage) -> bool:
    if stage.suffixes and not any(rel.endswith(s) for s in stage.suffixes):
        return False
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in stage.paths)


def stage_paths(root: Path, stage: Stage, changed: list[str] | None) -> list[str]:
    """The files or directories a scoped stage runs on (changed files in scope, or the existing scope)."""
    if changed is not None:
        return [f for f in changed if _in_scope(f, stage)]
    return [p for p in stage.paths if (root / p).exists()]


def selected_paths(root: Path, stage: Stage, changed: list[str] | None, context: dict) -> tuple[list[str], str]:
    """The stage's ``{paths}`` and, when empty, why: the test files covering the change for a ``select: tests``
    stage run with --changed (the whole scope when the change reaches every test), else :func:`stage_paths`."""
    if stage.select != "tests" or changed is None:
        paths = stage_paths(root, stage, changed) if stage.scoped else []
        why = "no changed file in scope" if changed is not None else "none of the scope paths exists"
        return paths, why
    from hp_agent.gate.select import ImportGraph, select_tests  # pylint: disable=import-outside-toplevel
    if "graph" not in context:
        context["graph"] = ImportGraph(root)
    selection = select_tests(root, changed, stage.paths, context.get("base"), context["graph"])
    if selection.tests is None:
        return [p for p in stage.paths if (root / p).exists()], ""
    return selection.tests, "no test covers the changed files"


def run_stage(root: Path, stage: Stage, changed: list[str] | None = None,
              context: dict | None = None) -> StageResult:
    """Run one stage in ``root`` and return its result (never raises for a failing tool)."""
    paths, why = selected_paths(root, stage, changed, context if context is not None else {})
    if stage.scoped and not paths:
        return StageResult(stage.name, "not-run", 0.0, shlex.join(stage.argv(["<none>"])), log_tail=why)
    argv = stage.argv(paths)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, env=env, timeout=stage.timeout_s,
                              check=False)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        partial = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output, code = partial + f"\n[gate] stage {stage.name} exceeded its {stage.timeout_s:.0f}s limit\n", -1
    except OSError as exc:
        output, code = f"[gate] cannot run {argv[0]}: {exc}\n", -1
    duration = time.monotonic() - started
    findings = PARSERS[stage.parser](output)
    status = "passed" if code in stage.ok_codes else "failed"
    tail = "\n".join(output.rstrip().splitlines()[-LOG_TAIL_LINES:])
    return StageResult(stage.name, status, duration, shlex.join(argv), findings, tail)


def _print_stage(console: Console, stage: Stage, res: StageResult) -> None:
    style = {"passed": "green", "failed": "bold red", "not-run": "yellow"}[res.status]
    console.print(f"[{style}]{res.status:>7}[/] {res.name} ({res.duration_s:.1f}s)")
    if stage.parser == "pytest" and res.status != "not-run":
        summary = pytest_summary(res.log_tail)
        console.print(f"        pytest: {summary or 'no summary line (see .gate/last.md)'}", markup=False)
    if res.status == "failed":
        for f in res.findings[:50]:
            console.print(f"        {f}", markup=False)
        if len(res.findings) > 50:
            console.print(f"        ... {len(res.findings) - 50} more in .gate/last.json", markup=False)
        if not res.findings:
            console.print("\n".join("        " + line for line in res.log_tail.splitlines()[-25:]), markup=False)


def _print_failed_tests(console: Console, results: list[StageResult], limit: int = 10) -> None:
    """Repeat the failed stages' first findings under the table: a CI system that keeps only the end of the log
    still shows which tests failed."""
    failed = [(res.name, f) for res in results if res.status == "failed" for f in res.findings]
    for name, finding in failed[:limit]:
        console.print(f"failed in {name}: {finding.test or finding.file}: {finding.message}"[:300], markup=False)
    if len(failed) > limit:
        console.print(f"... {len(failed) - limit} more findings in .gate/last.json", markup=False)


def run_gate(root: Path, stages: list[Stage], changed_only: bool = False,
             console: Console | None = None) -> tuple[GateReport, Path]:
    """Run ``stages`` in order, print progress and results, write the report; return it and its path."""
    con = console or Console(highlight=False, emoji=False, soft_wrap=True)
    base = default_base(root) if changed_only else None
    changed = changed_files(root, base) if changed_only else None
    context: dict = {"base": base}
    started = utc_now()
    results = []
    for index, stage in enumerate(stages, start=1):
        with con.status(f"[{index}/{len(stages)}] {stage.name} ..."):
            res = run_stage(root, stage, changed, context)
        _print_stage(con, stage, res)
        results.append(res)
    report = GateReport(started=started, finished=utc_now(), changed_only=changed_only, stages=results)
    path = write_report(report, root)
    table = Table(title=f"gate {'PASSED' if report.passed else 'FAILED'}")
    for col in ("stage", "status", "seconds", "findings"):
        table.add_column(col)
    for res in results:
        table.add_row(res.name, res.status, f"{res.duration_s:.1f}", str(len(res.findings)))
    con.print(table)
    _print_failed_tests(con, results)
    con.print(f"report: {path.relative_to(root)} (also .gate/last.json, .gate/last.md)", markup=False)
    return report, path
