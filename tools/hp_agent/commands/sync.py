# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent sync``: generate each assistant's files from .agent/ (``--check``: fail on drift)."""
from __future__ import annotations

import json
import sys

import click

from hp_agent.cliutil import EXIT_FINDINGS, EXIT_OK, internal_errors, json_option, root_or_exit
from hp_agent.sync.engine import diff, sync


@click.command(name="sync")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when a generated file differs, is missing or stale.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the unified diff of what sync would change.")
@json_option
@internal_errors
def cli_group(check: bool, show_diff: bool, as_json: bool) -> None:
    """Generate CLAUDE.md, .claude/, .cursor/, .github/ instructions, GEMINI.md, .gemini/ and AGENTS.md rules."""
    root = root_or_exit()
    if show_diff:
        click.echo(diff(root), nl=False)
        return
    res = sync(root, check=check)
    if as_json:
        click.echo(json.dumps({"ok": not res.drift, "written": res.written, "removed": res.removed,
                               "unchanged": res.unchanged, "drift": [f.to_dict() for f in res.drift]}, indent=2))
    else:
        for f in res.drift:
            click.echo(str(f))
        for rel in res.written:
            click.echo(f"wrote {rel}")
        for rel in res.removed:
            click.echo(f"removed {rel}")
        state = f"{len(res.drift)} drifted" if check else f"{len(res.written)} written, {len(res.removed)} removed"
        click.echo(f"sync: {state}, {res.unchanged} up to date")
    sys.exit(EXIT_FINDINGS if res.drift else EXIT_OK)
