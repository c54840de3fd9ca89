# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The commit-msg policy used by ``hp-agent git commit``.

The policy itself belongs to Agent layer I (``hp_agent.checks.commit_msg.check_commit_message``).  When
that module is not importable (an older checkout), the Conventional Commit header check below is applied
instead and the caller is told which policy ran.
"""
from __future__ import annotations

import importlib

from hp_agent.autogit.message import CONVENTIONAL_RE


def _builtin_check(message: str) -> list[str]:
    header = message.strip().splitlines()[0] if message.strip() else ""
    problems = []
    if not header:
        problems.append("commit message is empty")
    elif not CONVENTIONAL_RE.match(header):
        problems.append(f"header {header!r} is not 'type(scope): subject' (types: feat, fix, refactor, perf, "
                        f"test, docs, chore, ci, build, style, revert)")
    elif len(header) > 100:
        problems.append(f"header is {len(header)} characters long; keep it within 100")
    return problems


def check_message(message: str) -> tuple[list[str], str]:
    """Return ``(problems, policy_name)``; an empty list means the message is accepted."""
    try:
        module = importlib.import_module("hp_agent.checks.commit_msg")
    except ImportError:
        return _builtin_check(message), "autogit built-in Conventional Commit check"
    return list(module.check_commit_message(message)), "hp_agent.checks.commit_msg"
