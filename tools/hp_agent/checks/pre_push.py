# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The pre-push policy: no non-fast-forward push and no delete on a protected branch; fail closed.

Input is what git gives the ``pre-push`` hook on stdin, one line per ref:
``<local ref> <local sha> <remote ref> <remote sha>``. The pre-commit framework passes the same data in
``PRE_COMMIT_*`` environment variables instead; :func:`updates_from_pre_commit_env` reads those.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from hp_agent.checks.protected import PROTECTED, is_protected

__all__ = ["PROTECTED", "RefUpdate", "check_push", "is_protected", "parse_updates", "updates_from_pre_commit_env"]


@dataclass(frozen=True)
class RefUpdate:
    """One ref that a push would update."""

    local_ref: str
    local_sha: str
    remote_ref: str
    remote_sha: str


def _is_zero(sha: str) -> bool:
    return set(sha) == {"0"}


def parse_updates(text: str) -> list[RefUpdate]:
    """Parse the pre-push stdin lines; raises ValueError naming a malformed line."""
    updates = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise ValueError("pre-push input line is not '<local ref> <local sha> <remote ref> <remote sha>': "
                             f"{line!r}")
        updates.append(RefUpdate(*parts))
    return updates


def updates_from_pre_commit_env(env: dict) -> list[RefUpdate]:
    """Build the update list from the pre-commit framework's ``PRE_COMMIT_*`` variables (empty if absent)."""
    to_ref = env.get("PRE_COMMIT_TO_REF")
    if not to_ref:
        return []
    remote_branch = env.get("PRE_COMMIT_REMOTE_BRANCH", "")
    return [RefUpdate(env.get("PRE_COMMIT_LOCAL_BRANCH", "HEAD"), to_ref, remote_branch,
                      env.get("PRE_COMMIT_FROM_REF") or "0" * 40)]


def _git_ok(repo: Path, *args: str) -> bool:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=False).returncode == 0


def check_push(repo: Path, updates: list[RefUpdate], protected: tuple[str, ...] = PROTECTED) -> list[str]:
    """Return the reasons to refuse the push (empty: allowed)."""
    problems = []
    hint = ("push your work to a feature branch and open a PR; to rewrite your own (unprotected) branch "
            "use `git push --force-with-lease=<branch>:<expected sha>`")
    for up in updates:
        if not up.remote_ref.startswith("refs/heads/"):
            continue
        branch = up.remote_ref[len("refs/heads/"):]
        if not is_protected(branch, protected):
            continue
        if _is_zero(up.local_sha):
            problems.append(f"refusing to delete protected branch '{branch}'")
        elif _is_zero(up.remote_sha):
            continue  # creating the branch on the remote
        elif not _git_ok(repo, "cat-file", "-e", f"{up.remote_sha}^{{commit}}"):
            problems.append(f"refusing to push to protected branch '{branch}': the remote tip {up.remote_sha[:12]} "
                            "is unknown locally, so a fast-forward cannot be verified; run `git fetch` first")
        elif not _git_ok(repo, "merge-base", "--is-ancestor", up.remote_sha, up.local_sha):
            problems.append(f"refusing a non-fast-forward push to protected branch '{branch}' "
                            f"({up.remote_sha[:12]} is not an ancestor of {up.local_sha[:12]}); {hint}")
    return problems
