# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Entry point of ``hp-agent``.

Every module in ``hp_agent.commands`` that defines ``cli_group`` (a click command or group) is
added as a subcommand, so new groups never edit this file.

Exit codes (all commands): 0 success, 1 the check or action failed (findings reported),
2 usage error or refused action (bad input, policy refusal), 3 internal error.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from hp_agent import __version__
from hp_agent import commands as _commands_pkg


def _load_groups(root: click.Group) -> None:
    for info in sorted(pkgutil.iter_modules(_commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{_commands_pkg.__name__}.{info.name}")
        group = getattr(module, "cli_group", None)
        if isinstance(group, click.Command):
            root.add_command(group)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hp-agent")
def cli() -> None:
    """hp-agent: the hyper-parallel agent layer (rules, hooks, sync, checks, gate, dist-op, git, gate-doctor).

    \b
    Exit codes: 0 ok, 1 findings/failure, 2 usage error or refused, 3 internal error.
    """


_load_groups(cli)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    try:
        cli.main(args=argv, prog_name="hp-agent", standalone_mode=True)
    except SystemExit as exc:  # click exits through SystemExit
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
