# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The temporary-skip ledger: skip/xfail markers a PR adds to tests.

gate-doctor never proposes a skip, but a PR may contain one (added by a person, e.g. while a fix is under
way).  Each is recorded with file and line so the report can insist it is removed before merge.
"""
from __future__ import annotations

import re

SKIP_RE = re.compile(r"pytest\.mark\.(?:skip|skipif|xfail)\b|pytest\.(?:skip|xfail|importorskip)\(|"
                     r"unittest\.(?:skip|skipIf|skipUnless|expectedFailure)\b|@(?:skip|xfail)\b")
HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,\d+)? @@")


def added_skips(filename: str, patch: str) -> list[dict]:
    """Skip/xfail markers on lines that ``patch`` (a unified diff of ``filename``) adds."""
    found = []
    line_no = 0
    for line in patch.splitlines():
        hunk = HUNK_RE.match(line)
        if hunk:
            line_no = int(hunk.group("start"))
            continue
        if line.startswith("+++") or line.startswith("---"):
            continue
        if line.startswith("+"):
            if SKIP_RE.search(line):
                found.append({"file": filename, "line": line_no, "text": line[1:].strip()[:200]})
            line_no += 1
        elif not line.startswith("-"):
            line_no += 1
    return found


def split_git_diff(diff: str) -> list[tuple[str, str]]:
    """``git diff`` output → ``(new path, patch)`` per file."""
    out: list[tuple[str, str]] = []
    current, lines = None, []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            if current:
                out.append((current, "\n".join(lines)))
            current, lines = None, []
        elif line.startswith("+++ b/"):
            current = line[6:]
        else:
            lines.append(line)
    if current:
        out.append((current, "\n".join(lines)))
    return out
