# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which lines of a file a change touched (for the diff-aware after-write hook and pre-commit hook).

``None`` means "the whole file is new" (untracked, added, or no commit to compare with); an empty set
means "no line changed".
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,(?P<count>\d+))? @@", re.MULTILINE)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def hunk_lines(diff: str) -> set[int]:
    """Line numbers (in the new version) added or changed by a ``-U0`` unified diff."""
    lines: set[int] = set()
    for m in _HUNK.finditer(diff):
        start, count = int(m["start"]), int(m["count"]) if m["count"] is not None else 1
        lines.update(range(start, start + count))
    return lines


def changed_lines(root: Path, rel: str, staged: bool = False) -> set[int] | None:
    """Lines of ``rel`` changed against HEAD (the working tree, or the index with ``staged``)."""
    status = _git(root, "status", "--porcelain=v1", "--untracked-files=all", "--", rel)
    code = status.stdout[:2]
    if status.returncode != 0 or code == "??" or "A" in code:
        return None
    if not status.stdout.strip():
        return set()
    if _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").returncode != 0:
        return None
    args = ["diff", "--no-color", "--no-ext-diff", "-U0"] + (["--cached"] if staged else ["HEAD"]) + ["--", rel]
    proc = _git(root, *args)
    if proc.returncode != 0:
        return None
    if re.search(r"^new file mode", proc.stdout, re.MULTILINE):
        return None
    return hunk_lines(proc.stdout)
