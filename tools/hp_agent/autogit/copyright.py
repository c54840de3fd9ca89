# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Update the year in this project's own license header (never in third-party headers)."""
from __future__ import annotations

import re
from pathlib import Path

from hp_agent.license import HOLDER

HEADER_RE = re.compile(r"^(?P<lead>(?:#|//|/\*|\*|<!--)\s*Copyright )(?P<first>\d{4})(?:-(?P<last>\d{4}))?"
                       r"(?P<tail> " + re.escape(HOLDER) + r"\. All rights reserved\.)", re.MULTILINE)
HEAD_LINES = 5


def updated_header(text: str, year: int) -> str | None:
    """``text`` with the project header's year range extended to ``year``; None when nothing changes."""
    head, sep, rest = _split_head(text)
    match = HEADER_RE.search(head)
    if not match:
        return None
    first = int(match.group("first"))
    last = int(match.group("last") or first)
    if last >= year:
        return None
    new = f"{match.group('lead')}{first}-{year}{match.group('tail')}"
    return head[:match.start()] + new + head[match.end():] + sep + rest


def _split_head(text: str) -> tuple[str, str, str]:
    lines = text.split("\n")
    head = "\n".join(lines[:HEAD_LINES])
    rest = "\n".join(lines[HEAD_LINES:])
    return head, ("\n" if len(lines) > HEAD_LINES else ""), rest


def update_years(root: Path, paths: list[str], year: int) -> dict[str, str]:
    """Update headers of the given (existing, text) files; return ``{path: original text}`` of those changed."""
    changed: dict[str, str] = {}
    for rel in paths:
        path = root / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = updated_header(text, year)
        if new is not None:
            path.write_text(new, encoding="utf-8")
            changed[rel] = text
    return changed


def restore(root: Path, originals: dict[str, str]) -> None:
    """Put back the texts returned by :func:`update_years` (used when the commit does not happen)."""
    for rel, text in originals.items():
        (root / rel).write_text(text, encoding="utf-8")
