# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent gate-doctor``: diagnose, watch, check-pr, retest, report (see docs/agent/gate-doctor.md)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import click

from hp_agent.autogit.codehost import CodeHostError, make_codehost
from hp_agent.autogit.gitcmd import GitError
from hp_agent.autogit.output import EXIT_FAIL, EXIT_REFUSED, CommandFailed, emit_json, guarded, say
from hp_agent.config import PROVIDERS, ConfigError, load_config
from hp_agent.gate_doctor import protocol as P
from hp_agent.gate_doctor.backends import LocalBackend, RemoteBackend
from hp_agent.gate_doctor.clock import Clock
from hp_agent.gate_doctor.jenkins import JenkinsClient, JenkinsError
from hp_agent.gate_doctor.machine import Watcher
from hp_agent.gate_doctor.report import diagnose, final_report, render_text
from hp_agent.gate_doctor.state import StateStore
from hp_agent.repo import NotARepositoryError, repo_root

guard = guarded((ConfigError, ValueError, FileNotFoundError), (CodeHostError, JenkinsError, GitError,
                                                                CommandFailed, RuntimeError))


def _root() -> Path:
    """The repository root (honours ``HP_AGENT_REPO``); the current directory outside a repository."""
    try:
        return repo_root()
    except NotARepositoryError:
        return Path.cwd()


def _backend(pr: str, local: bool, report: str | None, provider: str | None,
             gate_args: tuple[str, ...] = ()) -> tuple:
    root = _root()
    cfg = load_config(root)
    if local or report:
        return LocalBackend(root, report=Path(report) if report else None, gate_args=gate_args), cfg, root
    if not pr.isdigit():
        raise ValueError(f"PR must be a number for the remote mode, got {pr!r} (use --local for local mode)")
    host = make_codehost(cfg, provider)
    jenkins = JenkinsClient(cfg.jenkins_url, cfg.jenkins_job, cfg.jenkins_user, cfg.jenkins_api_token)
    return RemoteBackend(int(pr), host, jenkins, root, cfg.bypass_max_seconds, _base(root, cfg)), cfg, root


def _base(root: Path, cfg) -> str:
    """The configured base branch, else the upstream remote's default branch (``master`` outside a clone)."""
    from hp_agent.autogit.flows import base_branch  # pylint: disable=import-outside-toplevel
    from hp_agent.autogit.gitcmd import Git  # pylint: disable=import-outside-toplevel
    try:
        return base_branch(Git(root), cfg)
    except GitError:
        return cfg.base_branch or "master"


def _store(root: Path, state_dir: str | None) -> StateStore:
    return StateStore(Path(state_dir) if state_dir else root / ".gate" / "doctor")


def common(func: Callable) -> Callable:
    """PR argument and the options every subcommand shares."""
    func = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(func)
    func = click.option("--provider", type=click.Choice(PROVIDERS), help="Code host (default from config).")(func)
    func = click.option("--report", "report_path", type=click.Path(dir_okay=False),
                        help="Local mode over this gate report instead of running `hp-agent gate run`.")(func)
    func = click.option("--local", is_flag=True, help="Local mode: `hp-agent gate run` reports, no server.")(func)
    return click.argument("pr")(func)


@click.group("gate-doctor")
def cli_group() -> None:
    """Watch and diagnose the CI gate of a PR (GitCode /check-pr → /retest protocol, Jenkins)."""


@cli_group.command("diagnose")
@common
@click.option("--build", "build_number", type=int, help="Diagnose this build instead of the newest.")
@guard
def diagnose_cmd(pr: str, local: bool, report_path: str | None, provider: str | None,  # noqa: PLR0913
                 as_json: bool, build_number: int | None) -> None:
    """Newest non-aborted build of PR: stages, failing-stage findings, bypass signals, labels, triage."""
    backend, _cfg, _root_dir = _backend(pr, local, report_path, provider)
    if isinstance(backend, LocalBackend) and report_path and build_number is None:
        backend.post(P.CMD_RETEST)
    result = diagnose(backend, pr, build_number)
    if as_json:
        emit_json(result)
    else:
        _print_diagnosis(result)
    sys.exit(0 if result["green"] or (isinstance(backend, LocalBackend) and result["verdict"] == "passed")
             else EXIT_FAIL)


def _print_diagnosis(result: dict) -> None:
    say(f"PR {result['pr']} head {str(result['head_sha'])[:12]} labels {result['labels']}")
    build = result.get("build")
    if not build:
        say("no build found for this PR")
        return
    say(f"build #{build['number']} {build['result']} ({build['duration_s']:.0f}s, matched by {build['matched_by']})"
        f" verdict={result['verdict']} green={result['green']}")
    if result["bypass"]["is_bypass"]:
        say(f"  BYPASS build (not a pass): {result['bypass']['reason']}")
    for stage in result.get("stages") or []:
        say(f"  stage {stage['name']}: {stage['status']}")
    for finding in result.get("findings", []):
        where = f"{finding['file']}:{finding['line']}" if finding["file"] else (finding["test"] or "-")
        say(f"  {finding['tool']} {where} {finding['rule']}: {finding['message']}")
    for fix in (result.get("triage") or {}).get("fixes", []):
        say(f"  fix: {fix['file']}:{fix['line']} {fix['rule']} → {fix['hint']}")


EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # the shell's 128 + signal number: "interrupted, run watch again to resume"


def exit_code(state) -> int:
    """0 passed; 143 / 130 interrupted by SIGTERM / Ctrl-C (state saved, resumable); 1 anything else."""
    if state.terminal == "passed":
        return 0
    if state.terminal == "interrupted":
        return EXIT_SIGTERM if "SIGTERM" in (state.note or "") else EXIT_SIGINT
    return EXIT_FAIL


@cli_group.command("watch")
@common
@click.option("--time-scale", type=float, help="Scale every wait (e.g. 0.01 for a demo); env HP_AGENT_TIME_SCALE.")
@click.option("--max-steps", type=int, help="Stop after this many transitions (state is kept).")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Where per-PR state files live.")
@click.option("--gate-stage", "gate_stages", multiple=True, help="Local mode: run only this gate stage (repeatable).")
@click.option("--changed", is_flag=True, help="Local mode: lint stages on changed files only.")
@guard
def watch_cmd(pr: str, local: bool, report_path: str | None, provider: str | None,  # noqa: PLR0913
              as_json: bool, time_scale: float | None, max_steps: int | None, state_dir: str | None,
              gate_stages: tuple[str, ...], changed: bool) -> None:
    """Drive PR to green: check-pr → retest → wait → classify, resumable, with back-off and ceilings."""
    gate_args = tuple(a for stage in gate_stages for a in ("--stage", stage)) + (("--changed",) if changed else ())
    backend, cfg, root = _backend(pr, local, report_path, provider, gate_args)
    clock = Clock(time_scale if time_scale is not None else cfg.time_scale)
    state = Watcher(backend, _store(root, state_dir), pr, clock).run(max_steps)
    report = final_report(state)
    _ = emit_json(report) if as_json else say(render_text(report))
    sys.exit(exit_code(state))


@cli_group.command("check-pr")
@common
@guard
def check_pr_cmd(pr: str, local: bool, report_path: str | None, provider: str | None, as_json: bool) -> None:
    """Post /check-pr unless the PR already has pr-check-pass."""
    backend, _cfg, _root_dir = _backend(pr, local, report_path, provider)
    labels = backend.snapshot()["labels"]
    posted = P.LABEL_CHECK not in labels
    if posted:
        backend.post(P.CMD_CHECK)
    result = {"pr": pr, "posted": P.CMD_CHECK if posted else None, "labels": labels}
    _ = emit_json(result) if as_json else say(f"posted {P.CMD_CHECK}" if posted else f"{P.LABEL_CHECK} already present")


@cli_group.command("retest")
@common
@guard
def retest_cmd(pr: str, local: bool, report_path: str | None, provider: str | None, as_json: bool) -> None:
    """Post /retest — refused without pr-check-pass (it would only start a fake-green bypass build)."""
    backend, _cfg, _root_dir = _backend(pr, local, report_path, provider)
    labels = backend.snapshot()["labels"]
    if P.LABEL_CHECK not in labels:
        say(f"refused: PR {pr} has no {P.LABEL_CHECK} label; a /retest now only starts a bypass build. "
            f"Run `hp-agent gate-doctor check-pr {pr}` and wait for the label.", err=True)
        sys.exit(EXIT_REFUSED)
    backend.post(P.CMD_RETEST)
    _ = emit_json({"pr": pr, "posted": P.CMD_RETEST, "labels": labels}) if as_json else say(f"posted {P.CMD_RETEST}")


@cli_group.command("report")
@click.argument("pr")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Where per-PR state files live.")
@guard
def report_cmd(pr: str, as_json: bool, state_dir: str | None) -> None:
    """The final report of the watch of PR: status, timeline, fixes, unresolved failures, counters, next."""
    state = _store(_root(), state_dir).load(pr)
    if state is None:
        raise ValueError(f"no watch state for PR {pr}; run `hp-agent gate-doctor watch {pr}` first")
    report = final_report(state)
    _ = emit_json(report) if as_json else say(render_text(report))
    sys.exit(exit_code(state))
