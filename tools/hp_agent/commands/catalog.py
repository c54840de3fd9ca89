# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent catalog``: the AGENTS.md tables vs the files under .agent/."""
from __future__ import annotations

import sys

import click

from hp_agent.assets import load_assets
from hp_agent.catalog import check_catalog, render_tables
from hp_agent.cliutil import emit_findings, internal_errors, json_option, root_or_exit


@click.group(name="catalog")
def cli_group() -> None:
    """The catalog of assets in AGENTS.md."""


@cli_group.command("check")
@json_option
@internal_errors
def check(as_json: bool) -> None:
    """Fail when a table row has no file or a file has no row."""
    findings = check_catalog(root_or_exit())
    sys.exit(emit_findings(findings, as_json, summary=f"catalog: {len(findings)} mismatch(es)"))


@cli_group.command("render")
@internal_errors
def render() -> None:
    """Print the catalog tables for the current .agent/ (paste into AGENTS.md)."""
    click.echo(render_tables(load_assets(root_or_exit())))
