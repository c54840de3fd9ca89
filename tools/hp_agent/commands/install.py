# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent install``: install the git hooks, the pre-commit configuration and the hp-agent launcher."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from hp_agent.cliutil import internal_errors, json_option, root_or_exit
from hp_agent.install import InstallResult, default_bin_dir, install


@click.command(name="install")
@click.option("--no-pre-commit-config", is_flag=True, help="Do not write/merge .pre-commit-config.yaml.")
@click.option("--launcher", is_flag=True, help="Also install the hp-agent launcher (default: a directory on PATH, see "
                                                  "`default_bin_dir`; ~/.local/bin first).")
@click.option("--launcher-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the launcher (implies --launcher).")
@click.option("--quiet", "-q", is_flag=True, help="Print only what changed.")
@json_option
@internal_errors
def cli_group(no_pre_commit_config: bool, launcher: bool, launcher_dir: Path | None, quiet: bool,
              as_json: bool) -> None:
    """Install commit-msg, pre-push and pre-commit git hooks (idempotent; foreign hooks are kept and chained)."""
    if launcher and launcher_dir is None:
        launcher_dir = default_bin_dir()
    res = install(root_or_exit(), with_config=not no_pre_commit_config, launcher_dir=launcher_dir)
    if as_json:
        click.echo(json.dumps(asdict(res), indent=2))
        return
    for line in _report(res, quiet):
        click.echo(line)


def _report(res: InstallResult, quiet: bool) -> list[str]:
    """What install did, one line each (``quiet``: only what changed, and problems)."""
    lines = [] if quiet and not res.written else [f"hooks directory: {res.hooks_dir}"]
    lines += [f"installed {name}" for name in res.written]
    lines += [] if quiet else [f"up to date {name}" for name in res.unchanged]
    lines += [f"kept the existing hook {old} as {new} (chained after ours)" for old, new in res.kept.items()]
    if res.config and (not quiet or res.config != "unchanged"):
        lines.append(f".pre-commit-config.yaml: {res.config}")
    if res.launcher and (not quiet or res.launcher != "unchanged"):
        what = {"kept": "left alone (a file not written by hp-agent is there)"}.get(res.launcher, res.launcher)
        lines.append(f"launcher {res.launcher_path}: {what}")
    if res.launcher and not res.launcher_on_path:
        lines.append(f"note: {Path(res.launcher_path).parent} is not on PATH; add it so `hp-agent ...` works anywhere "
                     "in the clone (assistants' rules and skills call `hp-agent`)")
    return lines
