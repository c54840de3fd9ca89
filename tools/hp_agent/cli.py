# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Entry point of ``hp-agent``.

Every module in ``hp_agent.commands`` that defines ``cli_group`` (a click command or group) is a
subcommand named after the module (``gate_doctor`` -> ``gate-doctor``), so new groups never edit this
file. Modules are imported only when their command runs; ``--help`` lists them from their docstrings.
``hp-agent hook ...`` takes a fast path that imports neither click nor the command modules.

Exit codes (all commands): 0 success, 1 the check or action failed (findings reported),
2 usage error or refused action (bad input, policy refusal), 3 internal error.
"""
from __future__ import annotations

import sys

from hp_agent import __version__

_COMMANDS_PKG = "hp_agent.commands"

SETUP_MESSAGE = ("hp-agent: the repository's environment is not set up ({missing} is missing); run `make install` "
                 "in the repository root (hooks keep working meanwhile: `hp-agent hook ...`)")
def command_modules() -> dict[str, str]:
    """Command name -> module name of every command module (without importing them)."""
    import pkgutil  # pylint: disable=import-outside-toplevel
    from hp_agent import commands  # pylint: disable=import-outside-toplevel

    return {info.name.replace("_", "-"): info.name for info in pkgutil.iter_modules(commands.__path__)
            if not info.name.startswith("_")}


def short_help(module: str) -> str:
    """First line of a command module's docstring, without its ``hp-agent x``: prefix (read, not imported)."""
    import re  # pylint: disable=import-outside-toplevel
    from pathlib import Path  # pylint: disable=import-outside-toplevel
    from hp_agent import commands  # pylint: disable=import-outside-toplevel

    text = (Path(commands.__path__[0]) / f"{module}.py").read_text(encoding="utf-8")
    m = re.search(r'"""(?P<first>[^\n]*)', text)
    first = m["first"].strip().rstrip('"') if m else ""
    return re.sub(r"^``hp-agent [\w -]+``:\s*", "", first)


def _build():
    import importlib  # pylint: disable=import-outside-toplevel

    import click  # pylint: disable=import-outside-toplevel

    class LazyGroup(click.Group):
        """A group whose subcommands are imported when used."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(command_modules())

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            module_name = command_modules().get(cmd_name)
            if module_name is None:
                return None
            module = importlib.import_module(f"{_COMMANDS_PKG}.{module_name}")
            group = getattr(module, "cli_group", None)
            return group if isinstance(group, click.Command) else None

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            rows = [(name, short_help(module)) for name, module in sorted(command_modules().items())]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="hp-agent")
    def root() -> None:
        """hp-agent: the hyper-parallel agent layer (rules, hooks, sync, checks, gate, dist-op, git, gate-doctor).

        \b
        Exit codes: 0 ok, 1 findings/failure, 2 usage error or refused, 3 internal error.
        """

    return root


_GROUP: list = []


def get_cli():
    """The click group (built on first call)."""
    if not _GROUP:
        _GROUP.append(_build())
    return _GROUP[0]


def __getattr__(name: str):
    if name == "cli":
        return get_cli()
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "hook":
        from hp_agent.hooks.entry import USAGE, run_hook_argv  # pylint: disable=import-outside-toplevel
        code = run_hook_argv(args[1:])
        if code is not None:
            return code
        try:
            import click  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            print(USAGE, file=sys.stderr)
            return 2
    try:
        group = get_cli()
    except ImportError as exc:
        print(SETUP_MESSAGE.format(missing=exc.name), file=sys.stderr)
        return 2
    try:
        group.main(args=args, prog_name="hp-agent", standalone_mode=True)
    except SystemExit as exc:  # click exits through SystemExit
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
