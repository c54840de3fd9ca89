# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent check``: the real checkers (assets, style, op registry, commit messages, shell, changes)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hp_agent.checks.assets import check_all_assets
from hp_agent.checks.commit_msg import check_commit_message
from hp_agent.checks.commits import RangeError, check_commits
from hp_agent.findings import Finding
from hp_agent.checks.op_registry import check_registry
from hp_agent.checks.review import review_changes
from hp_agent.checks.shell_guard import check_shell_command
from hp_agent.checks.style import style_file
from hp_agent.cliutil import EXIT_USAGE, emit_findings, internal_errors, json_option, root_or_exit
from hp_agent.repo import relative_to_repo


@click.group(name="check", invoke_without_command=True)
@json_option
@click.pass_context
@internal_errors
def cli_group(ctx: click.Context, as_json: bool) -> None:
    """Check the .agent/ assets (no subcommand: rules, skills, agents, commands, hooks), or run one checker."""
    if ctx.invoked_subcommand is not None:
        return
    root = root_or_exit()
    findings = check_all_assets(root, ctx.find_root().command)  # the CLI this runs under: no import of it
    sys.exit(emit_findings(findings, as_json, summary=f"assets: {len(findings)} finding(s)"))


@cli_group.command("style")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--fix/--no-fix", default=False, help="Write the safe fixes back (default: report only).")
@json_option
@internal_errors
def style(paths: tuple[Path, ...], fix: bool, as_json: bool) -> None:
    """License header, whitespace, final newline, `-> None`; report missing annotations and docstrings."""
    root = root_or_exit()
    findings: list[Finding] = []
    fixed = {}
    for path in paths:
        res = style_file(path, relative_to_repo(path, root), fix=fix)
        findings.extend(res.findings)
        if fix and res.fixed:
            fixed[res.path] = res.fixed
    if fixed and not as_json:
        for rel, what in fixed.items():
            click.echo(f"{rel}: fixed {', '.join(what)}")
    sys.exit(emit_findings(findings, as_json, summary=f"style: {len(findings)} finding(s)", extra={"fixed": fixed}))


@cli_group.command("op-registry")
@json_option
@internal_errors
def op_registry(as_json: bool) -> None:
    """Registry entries <-> rule modules and classes; duplicates; unknown fields (no torch import)."""
    findings, summary = check_registry(root_or_exit())
    sys.exit(emit_findings(findings, as_json, summary=f"op-registry: {summary}"))


@cli_group.command("plans")
@json_option
@internal_errors
def plans_check(as_json: bool) -> None:
    """Every confirmed plan is green (registered from this plan's sha, case files as rendered) and every
    pipeline registry entry or case file has a confirmed plan behind it (no processes)."""
    from hp_agent.dist_op.green import check_plans, plan_paths
    from hp_agent.dist_op.layout import load_layout
    layout = load_layout(root_or_exit())
    findings = check_plans(layout)
    summary = f"plans: {len(plan_paths(layout))} plan(s), {len(findings)} finding(s)"
    sys.exit(emit_findings(findings, as_json, summary=summary))


@cli_group.command("commit-msg")
@click.argument("message_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-m", "--message", help="The message text (instead of a file).")
@json_option
@internal_errors
def commit_msg(message_file: Path | None, message: str | None, as_json: bool) -> None:
    """Check a commit message against the repository policy."""
    if (message_file is None) == (message is None):
        click.echo("hp-agent check commit-msg: give exactly one of MESSAGE_FILE or -m", err=True)
        sys.exit(EXIT_USAGE)
    text = message if message is not None else message_file.read_text(encoding="utf-8")
    problems = check_commit_message(text)
    if as_json:
        click.echo(json.dumps({"ok": not problems, "problems": problems}, indent=2))
    else:
        click.echo("\n".join(problems) if problems else "commit message OK")
    sys.exit(1 if problems else 0)


@cli_group.command("commits")
@click.option("--base", default=None, help="Base branch ref (default: origin/main, main, origin/master, master).")
@click.option("--floor", default=None, help="Never check this commit or its ancestors (where the stage began).")
@json_option
@internal_errors
def commits(base: str | None, floor: str | None, as_json: bool) -> None:
    """Check every commit between the merge base (or the floor, on the base branch) and HEAD."""
    try:
        findings, summary = check_commits(root_or_exit(), base, floor)
    except RangeError as exc:
        click.echo(f"hp-agent check commits: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(emit_findings(findings, as_json, summary=summary))


@cli_group.command("shell")
@click.argument("command")
@json_option
@internal_errors
def shell(command: str, as_json: bool) -> None:
    """Would the before-shell hook block COMMAND or ask the user first? (exit 2 and the reasons when so)."""
    problems = check_shell_command(command)
    if as_json:
        click.echo(json.dumps({"blocked": bool(problems), "reasons": problems}, indent=2))
    else:
        click.echo("\n".join(problems) if problems else "allowed")
    sys.exit(2 if problems else 0)


@cli_group.command("changed")
@click.option("--base", default=None, help="Compare with this ref (default: merge-base with main/master).")
@json_option
@internal_errors
def changed(base: str | None, as_json: bool) -> None:
    """Review the branch: style report, op registry, commit messages and the rules for each changed file."""
    report = review_changes(root_or_exit(), base)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(report.to_text())
    sys.exit(1 if report.findings else 0)
