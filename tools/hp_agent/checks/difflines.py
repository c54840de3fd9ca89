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
    """Lines of ``rel`` changed against HEAD (the working tree, or the index with ``staged``).

    One ``git diff`` for the usual case (an edit of a tracked file); ``git ls-files`` only when the diff is
    empty, to tell an unchanged file from an untracked one.
    """
    args = ["diff", "--no-color", "--no-ext-diff", "-U0"] + (["--cached"] if staged else ["HEAD"]) + ["--", rel]
    proc = _git(root, *args)
    if proc.returncode != 0:
        return None  # no commit yet: everything is new
    if re.search(r"^new file mode", proc.stdout, re.MULTILINE):
        return None
    if proc.stdout.strip():
        return hunk_lines(proc.stdout)
    tracked = _git(root, "ls-files", "--", rel)
    return set() if tracked.returncode == 0 and tracked.stdout.strip() else None
