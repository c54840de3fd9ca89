# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Mechanical part of a code review of the current branch (backs the ``code-review`` command).

For every file changed since the base (committed, staged, unstaged and untracked): the style report
(check-only), the op-registry pairing when a registry/rule file changed, the commit messages of the branch,
and the rules that apply to each file, so the reviewer reads exactly the rules that matter.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hp_agent.checks.commit_msg import check_commit_message
from hp_agent.findings import Finding
from hp_agent.checks.op_registry import check_registry, is_registry_path
from hp_agent.checks.style import style_file
from hp_agent.rules import rules_for


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def default_base(root: Path) -> str | None:
    """The merge-base of HEAD with origin/main, main, origin/master or master (None when none exists)."""
    for ref in ("origin/main", "main", "origin/master", "master"):
        probe = subprocess.run(["git", "merge-base", "HEAD", ref], cwd=root, capture_output=True, text=True,
                               check=False)
        if probe.returncode == 0:
            return probe.stdout.strip()
    return None


def changed_files(root: Path, base: str | None) -> list[str]:
    """Files changed since ``base`` plus uncommitted and untracked ones (existing files only, sorted)."""
    names = set()
    if base:
        names.update(_git(root, "diff", "--name-only", f"{base}...HEAD").split("\n"))
    names.update(_git(root, "diff", "--name-only", "HEAD").split("\n"))
    names.update(_git(root, "ls-files", "--others", "--exclude-standard").split("\n"))
    return sorted(n for n in names if n and (root / n).is_file())


@dataclass
class Review:
    """The review: base, files with their rules, findings."""

    base: str | None
    files: dict[str, list[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON form."""
        return {"base": self.base, "files": self.files, "findings": [f.to_dict() for f in self.findings],
                "ok": not self.findings}

    def to_text(self) -> str:
        """Human form: findings, then the rules to read per file."""
        lines = [f"base: {self.base or '(none: uncommitted changes only)'}", f"{len(self.files)} changed file(s)"]
        lines += [str(f) for f in self.findings] or ["no mechanical findings"]
        lines.append("rules to review against (hp-agent rules show NAME):")
        lines += [f"  {path}: {', '.join(rules) or '-'}" for path, rules in self.files.items()]
        return "\n".join(lines)


def review_changes(root: Path, base: str | None = None) -> Review:
    """Build the :class:`Review` of the changes since ``base`` (default: :func:`default_base`)."""
    base = base or default_base(root)
    review = Review(base=base)
    files = changed_files(root, base)
    for rel in files:
        review.files[rel] = [r.name for r in rules_for(root, rel)]
        review.findings.extend(style_file(root / rel, rel, fix=False).findings)
    if any(is_registry_path(f) for f in files):
        review.findings.extend(check_registry(root)[0])
    if base:
        for sha in _git(root, "rev-list", f"{base}..HEAD").split():
            for problem in check_commit_message(_git(root, "log", "-1", "--format=%B", sha)):
                review.findings.append(Finding(f"commit {sha[:12]}", None, "commit-msg", problem))
    return review
