# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent gate``: run the CI gate's stages locally (the same list as ci/Jenkinsfile)."""
from __future__ import annotations

import json
import sys

import click
from rich.console import Console

from hp_agent.cliutil import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, internal_errors, json_option, root_or_exit
from hp_agent.gate.report import REPORT_DIR, load_report, render_markdown
from hp_agent.gate.runner import run_gate
from hp_agent.gate.stages import StageConfigError, load_stages


@click.group(name="gate")
def cli_group() -> None:
    """The gate (ci/stages.yaml): pylint, lizard, codespell, op-registry, catalog, assets, sync, UT, ST, agent."""


@cli_group.command("run")
@click.option("--stage", "names", multiple=True, help="Run only this stage (repeatable).")
@click.option("--changed", is_flag=True, help="Lint stages only on files changed since the merge-base with main.")
@json_option
@internal_errors
def run(names: tuple[str, ...], changed: bool, as_json: bool) -> None:
    """Run the stages, print each result (pytest's summary line for test stages), write .gate/ reports."""
    root = root_or_exit()
    try:
        stages = load_stages(root)
    except StageConfigError as exc:
        click.echo(f"hp-agent gate: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    known = [s.name for s in stages]
    unknown = [n for n in names if n not in known]
    if unknown:
        click.echo(f"hp-agent gate: unknown stage(s) {unknown}; stages: {', '.join(known)}", err=True)
        sys.exit(EXIT_USAGE)
    selected = [s for s in stages if not names or s.name in names]
    # with --json the progress display goes to stderr so that stdout is exactly the report
    console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True) if as_json else None
    report, _path = run_gate(root, selected, changed_only=changed, console=console)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    sys.exit(EXIT_OK if report.passed else EXIT_FINDINGS)


@cli_group.command("list")
@click.option("--names", is_flag=True, help="Only the stage names, one per line (used by ci/Jenkinsfile).")
@json_option
@internal_errors
def list_stages(names: bool, as_json: bool) -> None:
    """List the stages of ci/stages.yaml."""
    try:
        stages = load_stages(root_or_exit())
    except StageConfigError as exc:
        click.echo(f"hp-agent gate: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(json.dumps([{"name": s.name, "run": s.run, "paths": s.paths, "parser": s.parser} for s in stages],
                              indent=2))
    elif names:
        click.echo("\n".join(s.name for s in stages))
    else:
        for s in stages:
            click.echo(f"{s.name:12} {' '.join(s.run)}")


@cli_group.command("report")
@json_option
@internal_errors
def report_cmd(as_json: bool) -> None:
    """Print the last gate report (.gate/last.json) as Markdown or JSON; exit 1 when it failed."""
    path = root_or_exit() / REPORT_DIR / "last.json"
    if not path.is_file():
        click.echo("hp-agent gate report: no report yet; run `hp-agent gate run`", err=True)
        sys.exit(EXIT_USAGE)
    data = load_report(path)
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else render_markdown(data), nl=not as_json)
    sys.exit(EXIT_OK if data["passed"] else EXIT_FINDINGS)
