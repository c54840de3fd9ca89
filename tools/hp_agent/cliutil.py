# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the command modules: repo lookup, JSON/human output, exit codes."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console

from hp_agent.findings import Finding
from hp_agent.repo import NotARepositoryError, repo_root

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

console = Console(highlight=False, emoji=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

json_option = click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON report.")


def root_or_exit(start: Path | None = None) -> Path:
    """Return the repository root or exit 2 with a clear message when outside a git repository."""
    try:
        return repo_root(start)
    except NotARepositoryError as exc:
        err_console.print(f"hp-agent: {exc}")
        sys.exit(EXIT_USAGE)


def internal_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: an unexpected exception becomes exit 3 with a one-line cause (click's own exits pass)."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # pylint: disable=broad-except  # reported, exit 3; never swallowed
            err_console.print(f"hp-agent: internal error: {type(exc).__name__}: {exc}")
            sys.exit(EXIT_INTERNAL)
    return wrapper


def emit_findings(findings: list[Finding], as_json: bool, summary: str = "", extra: dict | None = None) -> int:
    """Print findings (one ``file:line: [rule] message`` each, or JSON) and return exit 0 or 1."""
    code = EXIT_FINDINGS if findings else EXIT_OK
    if as_json:
        data = {"ok": not findings, "summary": summary, "findings": [f.to_dict() for f in findings]}
        data.update(extra or {})
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        for f in findings:
            click.echo(str(f))
        if summary:
            click.echo(summary)
    return code
