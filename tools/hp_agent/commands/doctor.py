# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent doctor``: fire a test event through every configured assistant's hooks and check the setup."""
from __future__ import annotations

import json
import sys

import click

from hp_agent.cliutil import EXIT_FINDINGS, EXIT_OK, internal_errors, json_option, root_or_exit
from hp_agent.doctor import render, run_doctor


@click.command(name="doctor")
@click.option("--assistant", "only", multiple=True, help="Probe only this assistant (repeatable).")
@json_option
@internal_errors
def cli_group(only: tuple[str, ...], as_json: bool) -> None:
    """Do the hooks answer? For each assistant configured here, run its registered hook commands exactly as it
    would with test events; report answers, latency and what is missing (environment, PATH, git hooks, trust)."""
    report = run_doctor(root_or_exit(), only=only)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render(report))
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)
