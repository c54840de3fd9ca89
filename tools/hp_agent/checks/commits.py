# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The commit-message policy over a range of commits (the ``commit-msgs`` gate stage).

Which commits: on a branch, those between its merge base with the base branch and HEAD; on the base branch
itself (CI on ``main``), those after the *floor* - the commit the stage was introduced at, named in
``ci/stages.yaml`` - so the history before the policy was enforced is never rewritten to pass it. Commits
listed in ``ci/commit_msg_allowlist.txt`` (``<sha> <reason>`` lines) are skipped.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from hp_agent.checks.commit_msg import check_commit_message
from hp_agent.findings import Finding

ALLOWLIST = "ci/commit_msg_allowlist.txt"
BASE_CANDIDATES = ("origin/main", "main", "origin/master", "master")


class RangeError(ValueError):
    """The range cannot be computed (unknown ref, floor missing from a shallow clone...)."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def _resolve(root: Path, ref: str, what: str) -> str:
    proc = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0:
        raise RangeError(f"{what} {ref!r} is not a commit in this clone (a shallow clone? fetch more history)")
    return proc.stdout.strip()


def default_base_ref(root: Path) -> str | None:
    """The first of origin/main, main, origin/master, master that exists."""
    for ref in BASE_CANDIDATES:
        if _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode == 0:
            return ref
    return None


def allowlisted(root: Path) -> dict[str, str]:
    """sha prefix -> reason, from ``ci/commit_msg_allowlist.txt`` (comments and blank lines ignored)."""
    path = root / ALLOWLIST
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        line = line.split("#", 1)[0].strip()
        if line:
            sha, _, reason = line.partition(" ")
            out[sha] = reason.strip()
    return out


def commit_range(root: Path, base: str | None, floor: str | None) -> tuple[list[str], str]:
    """``(shas oldest first, description)`` of the commits the policy applies to."""
    head = _resolve(root, "HEAD", "HEAD")
    excluded, parts = [], []
    base_ref = base or default_base_ref(root)
    if base_ref is not None:
        merge_base = _git(root, "merge-base", head, _resolve(root, base_ref, "base")).stdout.strip()
        if merge_base and merge_base != head:
            excluded.append(merge_base)
            parts.append(f"merge base with {base_ref} ({merge_base[:12]})")
    if floor:
        excluded.append(_resolve(root, floor, "floor"))
        parts.append(f"floor {floor[:12]}")
    if not excluded:
        raise RangeError("no base branch (origin/main, main, origin/master, master) and no --floor: "
                         "name the range with --base REF or --floor SHA")
    shas = _git(root, "rev-list", "--reverse", head, *(f"^{e}" for e in excluded)).stdout.split()
    return shas, f"{len(shas)} commit(s) after " + " and ".join(parts)


def check_commits(root: Path, base: str | None = None, floor: str | None = None) -> tuple[list[Finding], str]:
    """Findings (``commit <sha>`` per problem) and a summary line."""
    shas, description = commit_range(root, base, floor)
    allowed = allowlisted(root)
    findings, skipped = [], 0
    for sha in shas:
        if any(sha.startswith(prefix) for prefix in allowed):
            skipped += 1
            continue
        message = _git(root, "log", "-1", "--format=%B", sha).stdout
        header = message.splitlines()[0] if message.strip() else ""
        findings.extend(Finding(f"commit {sha[:12]}", None, "commit-msg", f"{problem} ({header[:60]!r})")
                        for problem in check_commit_message(message))
    note = f"; {skipped} allow-listed" if skipped else ""
    return findings, f"commits: {description}{note}, {len(findings)} problem(s)"
