# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Draft a Conventional Commit message (``type(scope): subject``) from the paths being committed."""
from __future__ import annotations

import collections
import re
from pathlib import PurePosixPath

from hp_agent.autogit.staging import Change

_DOC_SUFFIXES = {".md", ".rst", ".txt"}
_BUILD_FILES = {"pyproject.toml", "Makefile", "setup.py", "setup.cfg", "requirements.txt", "MANIFEST.in"}
CONVENTIONAL_RE = re.compile(r"^(feat|fix|refactor|perf|test|docs|chore|ci|build|style|revert)"
                             r"(\([a-z0-9._/-]+\))?!?: \S.*$")


def path_type(path: str) -> str:
    """The commit type a single path suggests (docs, test, ci, build, perf or src)."""
    p = PurePosixPath(path)
    top = p.parts[0] if p.parts else ""
    if top in ("ci", ".ci", ".github", ".gitee") or p.name == "Jenkinsfile":
        return "ci"
    if top == "tests":
        return "test"
    if top == "benchmarks":
        return "perf"
    if top == "docs" or p.suffix in _DOC_SUFFIXES or top == "plans":
        return "docs"
    if p.name in _BUILD_FILES:
        return "build"
    return "src"


def path_scope(path: str) -> str:
    """The scope a path suggests: the sub-package under ``hyper_parallel``/``hp_agent``, else the top dir."""
    parts = PurePosixPath(path).parts
    if _is_ops_path(parts):
        return "ops"
    if len(parts) >= 3 and parts[0] == "tools" and parts[1] == "hp_agent":
        return PurePosixPath(parts[2]).stem.replace("_", "-")
    if len(parts) >= 2 and parts[0] == "hyper_parallel":
        return PurePosixPath(parts[1]).stem.replace("_", "-")
    if len(parts) >= 3 and parts[0] == "tests":
        return PurePosixPath(parts[2]).stem.removeprefix("test_").replace("_", "-")
    if len(parts) >= 2 and parts[0] in (".agent", "docs", "examples", "csrc", "ci"):
        return parts[0].lstrip(".")
    if len(parts) == 1:
        return "repo"
    return parts[0].lstrip(".").replace("_", "-")


def _is_ops_path(parts: tuple[str, ...]) -> bool:
    """The distributed-op system and its tests (``hyper_parallel/core/ops``, ``tests/*/ops``)."""
    return parts[:3] == ("hyper_parallel", "core", "ops") or (parts[:1] == ("tests",) and "ops" in parts[2:-1])


def infer_type(changes: list[Change]) -> str:
    """One type for the whole change set: a uniform non-source type wins; else feat for new source, fix."""
    kinds = {path_type(c.path) for c in changes}
    if len(kinds) == 1 and "src" not in kinds:
        return kinds.pop()
    src_new = [c for c in changes if path_type(c.path) == "src" and c.kind in ("added", "untracked")]
    if src_new:
        return "feat"
    return "fix" if "src" in kinds else "chore"


def infer_scope(changes: list[Change]) -> str | None:
    """The most common scope among source paths (all paths when none is source); None on a tie of many."""
    src = [c for c in changes if path_type(c.path) == "src"] or changes
    counts = collections.Counter(path_scope(c.path) for c in src)
    if not counts:
        return None
    (best, n), *rest = counts.most_common()
    if rest and rest[0][1] == n and len(counts) > 2:
        return None
    return best


def draft_subject(changes: list[Change]) -> str:
    """A short imperative subject: names the file for a single change, counts otherwise."""
    if len(changes) == 1:
        change = changes[0]
        verb = {"added": "add", "untracked": "add", "deleted": "remove", "renamed": "rename"}.get(change.kind,
                                                                                                  "update")
        return f"{verb} {PurePosixPath(change.path).name}"
    added = sum(c.kind in ("added", "untracked") for c in changes)
    deleted = sum(c.kind == "deleted" for c in changes)
    modified = len(changes) - added - deleted
    bits = [f"{n} {word}" for n, word in ((added, "new"), (modified, "changed"), (deleted, "removed")) if n]
    return f"update {len(changes)} files ({', '.join(bits)})"


def draft_message(changes: list[Change]) -> str:
    """The full drafted message for ``changes``; the user confirms or replaces it."""
    if not changes:
        raise ValueError("nothing to commit: the working tree has no changes")
    ctype = infer_type(changes)
    scope = infer_scope(changes)
    head = f"{ctype}({scope})" if scope else ctype
    return f"{head}: {draft_subject(changes)}"
