# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The fast path of ``hp-agent hook ...``: argument parsing without click, standard library only.

Assistants call a hook on every tool use, so ``hp-agent hook <event>`` must answer in well under 150 ms
and must work before ``make install`` (the shim ``.agent/bin/hp-agent`` then runs it with the system
``python3``). :func:`run_hook_argv` handles every well-formed hook invocation; anything else (``--help``,
a typo) returns None and the click CLI answers it.
"""
from __future__ import annotations

import sys

ASSISTANT_EVENTS = ("after-write", "before-shell", "after-turn")
USAGE = """usage: hp-agent hook EVENT [--assistant NAME]     EVENT: after-write | before-shell | after-turn
       hp-agent hook commit-msg MESSAGE_FILE
       hp-agent hook pre-push [REMOTE [URL]]
       hp-agent hook pre-commit [FILE...]"""


def _assistant_arg(args: list[str]) -> tuple[bool, str | None]:
    """``(valid, name)`` from ``[--assistant NAME]`` / ``[--assistant=NAME]``."""
    if not args:
        return True, None
    if len(args) == 2 and args[0] == "--assistant":
        return True, args[1]
    if len(args) == 1 and args[0].startswith("--assistant="):
        return True, args[0].split("=", 1)[1]
    return False, None


def _known_assistant(name: str | None) -> bool:
    from hp_agent import assistants  # pylint: disable=import-outside-toplevel
    if name is None:
        return True
    try:
        assistants.get(name)
    except ValueError:
        return False
    return True


def _emit(answer) -> int:
    if answer.stdout:
        sys.stdout.write(answer.stdout + "\n")
    if answer.stderr:
        sys.stderr.write(answer.stderr)
    sys.stdout.flush()
    return answer.exit_code


def _git_hook(event: str, rest: list[str]) -> int | None:
    from hp_agent.hooks import runner  # pylint: disable=import-outside-toplevel

    if event == "commit-msg" and len(rest) == 1:
        from pathlib import Path  # pylint: disable=import-outside-toplevel
        return _emit(runner.run_commit_msg_hook(Path(rest[0])))
    if event == "pre-push" and len(rest) <= 2:
        stdin = "" if sys.stdin.isatty() else sys.stdin.read()
        return _emit(runner.run_pre_push_hook(stdin))
    if event == "pre-commit" and not any(a.startswith("-") for a in rest):
        return _emit(runner.run_pre_commit_hook(files=list(rest) or None))
    return None


def run_hook_argv(args: list[str]) -> int | None:
    """Run ``hp-agent hook ARGS`` and return the exit code; None when the arguments are not a hook call."""
    from hp_agent.hooks import runner  # pylint: disable=import-outside-toplevel

    if not args or any(a in ("-h", "--help") for a in args):
        return None
    event, rest = args[0], args[1:]
    if event not in ASSISTANT_EVENTS:
        return _git_hook(event, rest)
    ok, assistant = _assistant_arg(rest)
    if not ok or not _known_assistant(assistant):
        return None
    return _emit(runner.run_assistant_hook(event, sys.stdin.read(), assistant))
