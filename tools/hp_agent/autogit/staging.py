# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The exact list of paths ``hp-agent git commit`` commits: the index (as git does), the named paths, or with
``--all`` every change, untracked non-ignored files too."""
from __future__ import annotations

import dataclasses

from hp_agent.autogit.gitcmd import Git

_KIND = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "C": "copied", "T": "modified",
         "U": "conflict", "?": "untracked"}


@dataclasses.dataclass(frozen=True)
class Change:
    """One path with its change kind (added, modified, deleted, renamed, untracked, conflict)."""

    path: str
    kind: str
    orig_path: str | None = None
    staged: bool = False  # the index holds a change of this path (X column of ``git status``)
    unstaged: bool = False  # the work tree differs from the index (Y column), untracked included

    def label(self) -> str:
        """Human-readable one-liner, e.g. ``renamed   a.py -> b.py``."""
        if self.orig_path:
            return f"{self.kind:<10}{self.orig_path} -> {self.path}"
        return f"{self.kind:<10}{self.path}"


def _kind(xy: str) -> str:
    if xy == "??":
        return "untracked"
    if "U" in xy or xy in ("AA", "DD"):
        return "conflict"
    for code in (xy[0], xy[1]):
        if code not in (" ", "."):
            return _KIND.get(code, "modified")
    return "modified"


def collect_changes(git: Git, paths: list[str] | None = None) -> list[Change]:
    """Parse ``git status --porcelain -z`` into changes, untracked files included, ignored ones excluded
    (only under ``paths`` when given)."""
    raw = git.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *(paths or [])).stdout
    parts = raw.split("\0")
    changes: list[Change] = []
    i = 0
    while i < len(parts):
        entry = parts[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        orig = None
        if xy[0] in "RC" or xy[1] in "RC":
            orig = parts[i]
            i += 1
        changes.append(Change(path=path, kind=_kind(xy), orig_path=orig, staged=xy[0] not in " ?",
                              unstaged=xy[1] != " "))
    return sorted(changes, key=lambda c: c.path)


def staged_changes(git: Git) -> list[Change]:
    """The changes the index holds (what a plain ``git commit`` would commit)."""
    return [c for c in collect_changes(git) if c.staged or c.kind == "conflict"]


def stage(git: Git, changes: list[Change]) -> None:
    """Stage exactly ``changes`` (deletions and renames included); refuses unresolved conflicts."""
    conflicts = [c.path for c in changes if c.kind == "conflict"]
    if conflicts:
        raise ValueError(f"unresolved merge conflicts in {', '.join(conflicts)}; resolve them first")
    paths: list[str] = []
    for change in changes:
        paths.append(change.path)
        if change.orig_path:
            paths.append(change.orig_path)
    if paths:
        git.run("add", "--all", "--", *paths)
