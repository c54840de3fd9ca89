# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent rules``: which rules apply to a path; list and show rules."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hp_agent.assets import load_assets
from hp_agent.cliutil import EXIT_USAGE, internal_errors, json_option, root_or_exit
from hp_agent.repo import relative_to_repo
from hp_agent.rules import is_always, rule_globs, rules_for


@click.group(name="rules", invoke_without_command=True)
@click.option("--for", "for_path", type=click.Path(path_type=Path), help="Print the rules that apply to PATH.")
@click.option("--names", is_flag=True, help="With --for: print only the rule names.")
@json_option
@click.pass_context
@internal_errors
def cli_group(ctx: click.Context, for_path: Path | None, names: bool, as_json: bool) -> None:
    """Rules of this repository (.agent/rules/*.md). `hp-agent rules --for PATH` prints those that apply."""
    if ctx.invoked_subcommand is not None:
        return
    root = root_or_exit()
    if for_path is None:
        click.echo(ctx.get_help())
        sys.exit(EXIT_USAGE)
    rel = relative_to_repo(for_path, root)
    rules = rules_for(root, rel)
    if as_json:
        click.echo(json.dumps({"path": rel, "rules": [{"name": r.name, "path": r.path, "description": r.description,
                                                       "paths": rule_globs(r), "body": r.body} for r in rules]},
                              indent=2, ensure_ascii=False))
    elif names:
        click.echo("\n".join(r.name for r in rules))
    else:
        for r in rules:
            scope = "always" if is_always(r) else ", ".join(rule_globs(r))
            click.echo(f"# {r.name} ({scope}) - {r.path}\n\n{r.body.strip()}\n")


@cli_group.command("list")
@json_option
@internal_errors
def list_rules(as_json: bool) -> None:
    """List every rule with its scope."""
    rules = load_assets(root_or_exit()).rules
    if as_json:
        click.echo(json.dumps([{"name": r.name, "path": r.path, "description": r.description,
                                "paths": rule_globs(r)} for r in rules], indent=2))
        return
    for r in rules:
        click.echo(f"{r.name:28} {'always' if is_always(r) else ', '.join(rule_globs(r))}  {r.description}")


@cli_group.command("show")
@click.argument("name")
@internal_errors
def show_rule(name: str) -> None:
    """Print one rule's text."""
    for r in load_assets(root_or_exit()).rules:
        if r.name == name:
            click.echo(r.body.strip())
            return
    click.echo(f"hp-agent rules show: no rule named {name!r}", err=True)
    sys.exit(EXIT_USAGE)
