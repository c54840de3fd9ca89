# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent hook``: the hook runner for assistants and git hooks (fast path in hp_agent.hooks.entry)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from hp_agent import assistants
from hp_agent.shared.protocol import HookAnswer
from hp_agent.hooks.runner import (run_assistant_hook, run_commit_msg_hook, run_pre_commit_hook,
                                   run_pre_push_hook)


def _answer(answer: HookAnswer) -> None:
    if answer.stdout:
        click.echo(answer.stdout)
    if answer.stderr:
        click.echo(answer.stderr, err=True, nl=False)
    sys.exit(answer.exit_code)


@click.group(name="hook")
def cli_group() -> None:
    """Run a hook. Assistant hooks read the hook JSON on stdin and block with exit 2 + stderr.

    \b
    after-write   style fixes and findings on the changed lines, op-registry pairing, for the written file(s)
    before-shell  blocks hook bypasses, force pushes to protected branches, unleased force pushes, bad
                  commit messages; destructive commands only when nothing is lost (else the user decides)
    after-turn    hands over findings the assistant could not receive during the turn (Cursor)
    commit-msg    git hook: Conventional Commits + no AI attribution (exit 1 rejects)
    pre-push      git hook: no non-fast-forward/delete on main, master, release/* (exit 2 refuses)
    pre-commit    git hook: license header, whitespace, final newline, registry pairing on staged changes
    """


_assistant = click.option("--assistant", type=click.Choice(assistants.names()),
                          help="Payload dialect (default: detected from the payload's shape).")


@cli_group.command("after-write")
@_assistant
def after_write(assistant: str | None) -> None:
    """After a file write/edit tool: fix style, report what needs a person, check the op registry."""
    _answer(run_assistant_hook("after-write", sys.stdin.read(), assistant))


@cli_group.command("before-shell")
@_assistant
def before_shell(assistant: str | None) -> None:
    """Before a shell command: block what would bypass or break the repository's git policy."""
    _answer(run_assistant_hook("before-shell", sys.stdin.read(), assistant))


@cli_group.command("after-turn")
@_assistant
def after_turn(assistant: str | None) -> None:
    """At the end of an agent turn: hand back findings kept during the turn."""
    _answer(run_assistant_hook("after-turn", sys.stdin.read(), assistant))


@cli_group.command("commit-msg")
@click.argument("message_file", type=click.Path(dir_okay=False, path_type=Path))
def commit_msg(message_file: Path) -> None:
    """git commit-msg hook: check MESSAGE_FILE."""
    _answer(run_commit_msg_hook(message_file))


@cli_group.command("pre-push")
@click.argument("remote", required=False)
@click.argument("url", required=False)
def pre_push(remote: str | None, url: str | None) -> None:
    """git pre-push hook: reads '<local ref> <local sha> <remote ref> <remote sha>' lines on stdin."""
    del remote, url  # git passes them; the policy only needs the ref lines
    stdin = "" if sys.stdin.isatty() else sys.stdin.read()
    _answer(run_pre_push_hook(stdin))


@cli_group.command("pre-commit")
@click.argument("files", nargs=-1)
def pre_commit(files: tuple[str, ...]) -> None:
    """git pre-commit hook: check the staged version of FILES (default: every staged file)."""
    _answer(run_pre_commit_hook(files=list(files) or None))
