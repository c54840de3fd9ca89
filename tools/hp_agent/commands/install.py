# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent install``: install the git hooks and the pre-commit configuration."""
from __future__ import annotations

import json
from dataclasses import asdict

import click

from hp_agent.cliutil import internal_errors, json_option, root_or_exit
from hp_agent.install import install


@click.command(name="install")
@click.option("--no-pre-commit-config", is_flag=True, help="Do not write/merge .pre-commit-config.yaml.")
@json_option
@internal_errors
def cli_group(no_pre_commit_config: bool, as_json: bool) -> None:
    """Install commit-msg, pre-push and pre-commit git hooks (idempotent; foreign hooks are kept and chained)."""
    res = install(root_or_exit(), with_config=not no_pre_commit_config)
    if as_json:
        click.echo(json.dumps(asdict(res), indent=2))
        return
    click.echo(f"hooks directory: {res.hooks_dir}")
    for name in res.written:
        click.echo(f"installed {name}")
    for name in res.unchanged:
        click.echo(f"up to date {name}")
    for old, new in res.kept.items():
        click.echo(f"kept the existing hook {old} as {new} (chained after ours)")
    if res.config:
        click.echo(f".pre-commit-config.yaml: {res.config}")
