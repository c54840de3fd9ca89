# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The before-shell guard on its own: what is blocked, what is let through, and why."""
from __future__ import annotations

import pytest

from hp_agent.checks.shell_guard import check_shell_command

HEREDOC = "git commit -m \"$(cat <<'EOF'\nfeat(core): add mesh\n\nBody.\nEOF\n)\""


@pytest.mark.parametrize("command,fragment", [
    ("git push -f origin main", "force-pushing protected branch 'main'"),
    ("git push origin +main", "force-pushing protected branch 'main'"),
    ("git push origin +HEAD:refs/heads/release/2.0", "release/2.0"),
    ("git push --delete origin master", "deleting protected branch 'master'"),
    ("git push origin :main", "deleting protected branch 'main'"),
    ("git push --force origin feature", "without a lease"),
    ("git push --no-verify origin feature", "--no-verify"),
    ("git commit --no-verify -m 'feat(x): y'", "--no-verify"),
    ("git commit -anm 'feat(x): y'", "--no-verify"),
    ("git -c core.hooksPath=/dev/null commit -m 'feat(x): y'", "core.hooksPath"),
    ("git commit -m 'Fix stuff.'", "commit message"),
    ("git commit -m 'feat(x): y' -m 'Co-authored-by: Claude <noreply@anthropic.com>'", "Claude"),
    ("cd repo\ngit push -f origin main", "protected branch 'main'"),
    ("make test && git push -f origin main", "protected branch 'main'"),
    ("GIT_TRACE=1 /usr/bin/git push -f origin main", "protected branch 'main'"),
    ("echo 'unterminated", "cannot parse"),
])
def test_blocked(command, fragment):
    problems = check_shell_command(command)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("command", [
    "git status", "ls | grep x", "git push origin feature", "git push --force-with-lease origin feature",
    "git commit -m 'fix(mesh): handle size-1 dims'", HEREDOC, "git commit -m \"$MSG\"",
    "echo 'git push -f origin main'", "git log --format=%B -n 1",
])
def test_allowed(command):
    assert check_shell_command(command) == []
